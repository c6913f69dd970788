"""The project's layering rules, checked by reading every module's imports with ``ast``.

Rules (issue #28): no import cycle among the project's modules (a lazy import
inside a function counts as an edge too: it still ties the two modules
together); the Beam-free core ``transforms/mechanisms/`` reaches no
``apache_beam``, not even through a project module it imports; ``transforms``
imports nothing from ``pipelines``; only ``benchmarks`` and ``tests`` import
``benchmarks``.  Imports under ``if TYPE_CHECKING:`` are annotations only and
are not edges.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transforms", "pipelines", "benchmarks", "device", "schemas", "tests")


@dataclass(frozen=True)
class ImportEdge:
    """One import of ``target`` (a module name, project or not) by ``source`` at ``line``."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int
    lazy: bool


@functools.cache
def module_files() -> dict[str, Path]:
    """Every project module by dotted name (a package by its ``__init__``)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    for path in sorted(ROOT.glob("*.py")):
        if path.name != "setup.py":
            modules[path.stem] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, lazy: bool = False):
    """(node, lazy) for every import, skipping ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child):
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, lazy
        inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _imports(child, inner)


def _sibling(name: str, target: str, modules: dict[str, str] | dict[str, Path]) -> str:
    """A test helper imported by bare name (pytest puts a test's folder on the path)."""
    if target in modules or not name.startswith("tests."):
        return target
    sibling = ".".join([*name.split(".")[:-1], target])
    return sibling if sibling.split(".")[0] == "tests" and (
        sibling in modules or any(m.startswith(sibling + ".") for m in modules)) else target


@functools.cache
def import_edges() -> tuple[ImportEdge, ...]:
    """Every import of every project module, resolved to the module it loads."""
    modules = module_files()
    edges: list[ImportEdge] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, lazy in _imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    edges.append(ImportEdge(name, _sibling(name, alias.name, modules), (), node.lineno, lazy))
                continue
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            else:
                base = _sibling(name, base, modules)
            plain = tuple(alias.name for alias in node.names if f"{base}.{alias.name}" not in modules)
            if plain or base not in modules:
                edges.append(ImportEdge(name, base, plain, node.lineno, lazy))
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    edges.append(ImportEdge(name, f"{base}.{alias.name}", (), node.lineno, lazy))
    return tuple(edges)


def project_graph(include_lazy: bool = True) -> dict[str, set[str]]:
    """Module -> project modules it imports."""
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for edge in import_edges():
        if edge.target in modules and edge.target != edge.source and (include_lazy or not edge.lazy):
            graph[edge.source].add(edge.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_even_through_lazy_imports() -> None:
    assert cycles(project_graph(include_lazy=True)) == []


def test_mechanisms_core_reaches_no_beam() -> None:
    graph = project_graph()
    beam_users = {edge.source for edge in import_edges() if edge.target.split(".")[0] == "apache_beam"}
    core = [name for name in graph if name.startswith("transforms.mechanisms")]
    offenders = []
    for start in core:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if seen & beam_users:
            offenders.append((start, sorted(seen & beam_users)))
    assert offenders == []


def test_transforms_import_nothing_from_pipelines() -> None:
    wrong = [edge for edge in import_edges()
             if edge.source.split(".")[0] == "transforms" and edge.target.split(".")[0] == "pipelines"]
    assert wrong == []


def test_only_benchmarks_and_tests_import_benchmarks() -> None:
    wrong = [edge for edge in import_edges()
             if edge.target.split(".")[0] == "benchmarks" and edge.source.split(".")[0] not in ("benchmarks", "tests")]
    assert wrong == []


def test_no_private_name_is_imported_from_another_project_module() -> None:
    modules = module_files()
    private = [(edge.source, edge.target, name) for edge in import_edges() if edge.target in modules
               for name in edge.names if name.startswith("_")]
    private += [(edge.source, edge.target, "") for edge in import_edges()
                if edge.target not in modules and edge.target.rpartition(".")[0] in modules
                and edge.target.rpartition(".")[2].startswith("_")]
    assert private == []


MAX_LINES = 700


def test_no_python_file_is_longer_than_700_lines() -> None:
    too_long = {name: lines for name, path in module_files().items()
                if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert too_long == {}
