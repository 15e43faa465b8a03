"""The import graph drawn from the code keeps its floors (every import, also those inside
functions, read with ``ast``).

- no circle inside ``pddbench.harness``;
- ``pddbench.netem`` (the network layer below the harness) imports nothing of the harness;
- the judge half, ``harness.analysis``, imports nothing from the run half's ``plan``,
  ``drive`` or ``deploy``;
- ``harness.config`` imports nothing else of the harness, ``harness.rundir`` only config.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pddbench"
HARNESS = "pddbench.harness"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    yield sorted(component)


def test_the_walk_sees_the_imports() -> None:
    # the walk itself can fail: it must find imports inside functions and relative ones
    assert "pddbench.harness.jobs.run_system" in GRAPH["pddbench.harness.jobs.replay"]
    assert "pddbench.harness.drive.locust.launcher" in GRAPH["pddbench.harness.drive.locust"]
    assert list(_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


def test_no_import_circle_inside_the_harness() -> None:
    harness = {
        n: {m for m in deps if _under(m, HARNESS)}
        for n, deps in GRAPH.items()
        if _under(n, HARNESS)
    }
    assert list(_cycles(harness)) == []


def test_netem_imports_nothing_of_the_harness() -> None:
    up = sorted(
        f"{n} -> {m}"
        for n, deps in GRAPH.items()
        if _under(n, "pddbench.netem")
        for m in deps
        if _under(m, HARNESS)
    )
    assert up == []


def test_analysis_imports_nothing_of_the_run_half() -> None:
    run_half = [f"{HARNESS}.{p}" for p in ("plan", "drive", "deploy")]
    up = sorted(
        f"{n} -> {m}"
        for n, deps in GRAPH.items()
        if _under(n, f"{HARNESS}.analysis")
        for m in deps
        if any(_under(m, p) for p in run_half)
    )
    assert up == []


def test_config_is_the_ground_floor_and_rundir_stands_on_it() -> None:
    # config/ (what a user sets) imports nothing else of the harness; rundir/ (the run
    # folder contract between the run half and the judge half) only config/
    allowed = {"config": ("config",), "rundir": ("config", "rundir")}
    up = sorted(
        f"{n} -> {m}"
        for floor, below in allowed.items()
        for n, deps in GRAPH.items()
        if _under(n, f"{HARNESS}.{floor}")
        for m in deps
        if _under(m, HARNESS) and not any(_under(m, f"{HARNESS}.{b}") for b in below)
    )
    assert up == []
