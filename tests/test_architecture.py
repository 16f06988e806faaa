"""The package's shape: a pure core that imports neither Ray nor pandas, no import cycle between its modules,
and no module grown past about 450 lines without a stated reason (docs/design.md, "Repository layout")."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ultracluster"

# The pure core: scenario → cluster → chip, operators, network, storage, replay engine. Ray is the actors'
# business and pandas the report's.
CORE = ["ultracluster.chip", "ultracluster.operators", "ultracluster.cluster", "ultracluster.network",
        "ultracluster.replay.engine", "ultracluster.scenario", "ultracluster.memory", "ultracluster.storage",
        "ultracluster.fairshare", "ultracluster.goodput", "ultracluster.uncertainty"]

MAX_LINES = 460        # about 450
# module → why it is longer (each a candidate for the next split)
LONG_MODULES = {
    "replay/engine.py": "the step replay loop and its per-phase pricing read as one piece",
    "cluster/catalog.py": "hardware tables: one entry per chip and instance type, each citing its source",
}


def test_the_core_imports_neither_ray_nor_pandas():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in CORE)
            + "print(sorted(m for m in ('ray', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import the module runs, at its top or inside functions; not those for type checkers only."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    walk(sub)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            else:
                walk(child)
    walk(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """module → the package's modules it imports (`from . import x` counts as x when x is a module)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
                continue
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names}
        graph[name] = {e for e in edges if e in paths and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_joins_modules_of_the_package():
    graph = import_graph()
    assert "ultracluster.chip" in graph["ultracluster.replay.engine"]      # the graph sees relative imports
    assert cycles(graph) == []


def test_no_module_is_long_without_a_reason():
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    long = {p for p, n in lengths.items() if n > MAX_LINES}
    assert long <= set(LONG_MODULES), sorted(long - set(LONG_MODULES))
    assert set(LONG_MODULES) <= set(lengths), "a listed module is gone: drop it from LONG_MODULES"


# The report only reads the replay's typed result (`replay.events`): it never calls back into the replay, the
# emulation or the actors, at module level or inside a function.
REPORT_MAY_NOT_IMPORT = ("ultracluster.replay.engine", "ultracluster.replay.records", "ultracluster.replay.profile",
                         "ultracluster.replay.schedule", "ultracluster.replay.degraded", "ultracluster.emulate",
                         "ultracluster.pipeline", "ultracluster.actors", "ultracluster.chip")


def test_the_report_reads_the_result_and_never_calls_the_replay():
    graph = import_graph()
    report = {m: deps for m, deps in graph.items() if m == "ultracluster.report" or m.startswith("ultracluster.report.")}
    assert "ultracluster.replay.events" in report["ultracluster.report.summary"]   # the graph sees the report's imports
    bad = {m: sorted(d for d in deps if d.startswith(REPORT_MAY_NOT_IMPORT)) for m, deps in report.items()}
    assert {m: d for m, d in bad.items() if d} == {}
