"""Every third-party package that the installed modules import when loaded is a runtime dependency in setup.py
(not only a test extra): a machine that installs the project without its test extra can run every job."""

from __future__ import annotations

import ast
import glob
import importlib.metadata
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWN = {"pipelines", "transforms", "schemas", "device", "benchmarks", "integration"}


def parse(path: str) -> ast.Module:
    with open(path) as f:
        return ast.parse(f.read())


def install_requires() -> set[str]:
    tree = parse(os.path.join(ROOT, "setup.py"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            return {re.split(r"[<>=!~\[; ]", requirement)[0].lower() for requirement in ast.literal_eval(node.value)}
    raise AssertionError("setup.py has no install_requires")


def module_level_imports(path: str) -> set[str]:
    """The top-level names a module imports when it is loaded (not those imported inside functions)."""
    names: set[str] = set()
    for node in parse(path).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in OWN and n != "__future__"}


def test_every_module_level_third_party_import_is_a_runtime_dependency():
    distributions = importlib.metadata.packages_distributions()
    required = install_requires()
    modules = [p for pattern in ("pipelines/**/*.py", "transforms/**/*.py", "schemas/**/*.py", "device/**/*.py")
               for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    assert len(modules) > 20
    missing = {}
    for path in modules:
        for name in module_level_imports(path):
            dists = {d.lower() for d in distributions.get(name, [name])}
            if not dists & required:
                missing.setdefault(name, os.path.relpath(path, ROOT))
    assert not missing, f"imported when loaded but not in install_requires: {missing}"
