"""Every example in a docstring runs (STYLE.md: "an example in the docstring that runs"): analysis/'s first,
where scipy-style docstrings carry most of them, and every other module that has one.

pytest's --doctest-modules would not do it: it collects doctests only from the paths it is given, and the
suite is run as the README says, `pytest tests`, which sets aside pyproject's testpaths; a doctest-modules
run over tests/ would only import the test files again. So each module's examples are run here, found as
pytest and doctest.testmod find them, with testmod's rules."""

import doctest
import importlib
import inspect
import io
import os
import pkgutil
import tomllib

import pytest
from conftest import ROOT


def _with_examples() -> list[str]:
    """Every module of perfctl's packages (pyproject.toml's list; generated code and Alembic's scripts left
    out) whose source holds a docstring example (a line starting with >>>), by name; only the packages are
    imported here."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    found = []
    for package in packages:
        if package == "perfctl.v1" or ".migrations" in package:
            continue
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
            path = os.path.join(info.module_finder.path, info.name.rsplit(".", 1)[1] + ".py")
            if info.ispkg or not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as source:
                if any(line.lstrip().startswith(">>> ") for line in source):
                    found.append(info.name)
    return sorted(found)


MODULES = _with_examples()


def test_every_analysis_module_with_examples_is_found():
    """analysis/ has examples in these modules (a module that gains some is run too: the list only grows)."""
    analysis = {name.removeprefix("perfctl.analysis.") for name in MODULES if name.startswith("perfctl.analysis.")}
    assert analysis >= {"ab", "alike", "distributions", "disturbance", "mixture", "rank_tests", "ratio_edges",
                        "sequential", "spa", "sparc", "special", "speedup_test", "statstack", "summary",
                        "verdicts"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    tests = [test for test in doctest.DocTestFinder().find(module) if test.examples]
    source = inspect.getsource(module)
    # every example in the file is in a docstring doctest finds (not one it skips, such as a nested function's)
    assert sum(len(test.examples) for test in tests) == sum(
        1 for line in source.splitlines() if line.lstrip().startswith(">>> ")), name
    output = io.StringIO()
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test, out=output.write)
    assert runner.failures == 0, output.getvalue()
