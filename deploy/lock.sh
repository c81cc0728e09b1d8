#!/usr/bin/env bash
# Refresh deploy/requirements.lock: every Python package deploy/setup.sh installs (perfctl's dependencies,
# its test tools, and the setuptools/wheel that build it), pinned to the newest releases pyproject.toml's
# ranges allow today, each with the sha256 of every file of that release. Commit the result; CI and users
# then install exactly what was tested. Run it after changing a dependency in pyproject.toml, then
# `./deploy/setup.sh && .venv/bin/ruff check . && .venv/bin/python -m pytest tests` before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/python" -m pip install -q --disable-pip-version-check pip-tools==7.6.2
CUSTOM_COMPILE_COMMAND=./deploy/lock.sh "$tools/bin/pip-compile" -q --generate-hashes --allow-unsafe --strip-extras --all-build-deps --extra test \
    --no-emit-index-url --no-emit-find-links --output-file deploy/requirements.lock pyproject.toml
echo "lock: $(grep -c '==' deploy/requirements.lock) packages pinned in deploy/requirements.lock"
