#!/usr/bin/env python3
"""Regenerate the committed Python code of protos/perfctl/v1/*.proto into protos/perfctl/v1/.

The generated modules are committed (one way, stated in the README), so installing perfctl needs no protoc;
run this after editing a .proto, with grpcio-tools installed: python protos/generate.py
"""

import pathlib
import sys

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent
protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "perfctl" / "v1").glob("*.proto"))
code = protoc.main(["protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--grpc_python_out={ROOT}",
                    f"--pyi_out={ROOT}", *protos])
sys.exit(code)
