"""The package's shape: a pure core that imports neither Ray nor pandas, no import cycle between its modules nor
between its subpackages, layers that only import downwards (the table in docs/design.md, "Layers", read here),
and no module grown past about 450 lines without a stated reason (docs/design.md, "Repository layout")."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:   # Python 3.10: pyproject's test extra installs tomli there
    import tomli as tomllib

PACKAGE = Path(__file__).resolve().parents[1] / "ultracluster"
DESIGN = PACKAGE.parent / "docs" / "design.md"
RAY_LAYER = "Ray adapter"

# The pure core: scenario → cluster → chip, operators, network, storage, replay engine. Ray is the actors'
# business and pandas the report's.
CORE = ["ultracluster.chip", "ultracluster.speed_draws", "ultracluster.operators", "ultracluster.cluster", "ultracluster.network",
        "ultracluster.replay.engine", "ultracluster.scenario", "ultracluster.memory", "ultracluster.storage",
        "ultracluster.fairshare", "ultracluster.goodput", "ultracluster.uncertainty", "ultracluster.yaml_input",
        "ultracluster.step", "ultracluster.calibration", "ultracluster.uncertain_factors"]

MAX_LINES = 460        # about 450
# module → why it is longer (each a candidate for the next split)
LONG_MODULES = {
    "goodput.py": "goodput over hours (failures, checkpoints, restarts) and what it makes of a training budget (days "
                  "and dollars, the closed form): one question, asked by run, sweep and plan",
    "cluster/catalog.py": "hardware tables: one entry per chip and instance type, each citing its source",
    "cli.py": "every command's flags, help and exit codes in one parser, the one place a user's input enters",
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


def _lazy_exports(tree: ast.Module) -> list[str]:
    """The modules a PEP 562 façade imports on first use: the values of its `_EXPORTS = {name: module}`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return [v.value for v in node.value.values if isinstance(v, ast.Constant)]
    return []


def _parents(name: str) -> list[str]:
    """`a.b.c` → [a, a.b, a.b.c]: what importing it runs, outermost first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph() -> dict[str, set[str]]:
    """module → the package's modules that its imports run, counted honestly:

    - imports inside functions count (they run on first call), those under `TYPE_CHECKING` do not;
    - importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` first, so each parent package counts,
      except the importer's own parents (already running when it is imported);
    - `from . import x` counts x when x is a module, and `from pkg import name` counts `pkg` itself even
      when `pkg` is the importer's own package (its `__init__` must have run that far);
    - a façade's lazy `_EXPORTS` (PEP 562) count as imports of the modules they name.
    """
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        own_parents = set(_parents(name)[:-1])
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: list[tuple[str, list[str], bool]] = []   # (module, its submodules named, other names taken)
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets += [(a.name, [], True) for a in node.names]
                continue
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths]
            targets.append((base, subs, len(subs) < len(node.names)))
        targets += [(".".join(package + [m.lstrip(".")]) if m.startswith(".") else m, [], True)
                    for m in _lazy_exports(tree)]
        edges: set[str] = set()
        for base, subs, names in targets:
            edges |= {p for p in _parents(base) if p not in own_parents} | set(subs)
            if names:                        # names read from `base` itself: its __init__ must have run that far
                edges.add(base)
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


def test_the_graph_counts_function_level_imports_parent_packages_and_lazy_exports():
    graph = import_graph()
    assert "ultracluster.operators" in graph["ultracluster.replay.comm"]   # the graph sees relative imports
    assert "ultracluster.uncertainty" in graph["ultracluster.runner"]    # an import inside a function
    assert "ultracluster.network" in graph["ultracluster.replay.comm"]     # the parent package that runs first
    assert "ultracluster.runner" in graph["ultracluster"]                # the public API's lazy `_EXPORTS`
    assert "ultracluster.report" not in graph["ultracluster.report.frames"]  # its own package is already running


def test_no_import_cycle_joins_modules_of_the_package():
    assert cycles(import_graph()) == []


def package_of(module: str) -> str:
    """`ultracluster.x.y` → `ultracluster.x`: the package's own subpackage or top-level module a module is in."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto the package's subpackages and top-level modules (`package_of`): an edge
    wherever a module of one imports a module of another."""
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(package_of(m), set()).update(package_of(d) for d in deps if package_of(d) != package_of(m))
    for deps in list(out.values()):
        for d in deps:
            out.setdefault(d, set())
    return out


def test_the_package_graph_finds_a_cycle_that_no_module_cycle_shows():
    modules = {"ultracluster.a.x": {"ultracluster.b.y"}, "ultracluster.b.y": set(),
               "ultracluster.b.z": {"ultracluster.a.w"}, "ultracluster.a.w": set()}
    assert cycles(modules) == []
    assert cycles(package_graph(modules)) == [["ultracluster.a", "ultracluster.b"]]


def test_no_import_cycle_joins_packages_of_the_package():
    """Counted between subpackages and top-level modules too, not only between modules: two packages that import
    each other (through different modules) are one room, whatever their names say."""
    assert cycles(package_graph(import_graph())) == []


def test_the_interval_arithmetic_never_enters_the_model():
    """`uncertainty` is the interval's arithmetic: it is given the function that times its settings
    (`layouts.setting_times`), and reaches none of the layouts, the emulation, the replay or the shards."""
    graph = import_graph()
    reach, todo = set(), ["ultracluster.uncertainty"]
    while todo:
        for d in graph[todo.pop()] - reach:
            reach.add(d)
            todo.append(d)
    model = ("ultracluster.layouts", "ultracluster.emulate", "ultracluster.replay", "ultracluster.actors",
             "ultracluster.shards", "ultracluster.runner")
    assert "ultracluster.domain" in reach and sorted(m for m in reach if m.startswith(model)) == []


def layers() -> list[tuple[str, list[str]]]:
    """docs/design.md's layers, top to bottom: (name, module entries); an entry `x` is `ultracluster.x` and the
    modules under it that no longer entry names, `__init__` the package's own `__init__.py`."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("### Layers"):]
    section = section[:section.index("\n#", 1)]
    found = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.match(r"\d+\. ", cells[0]):
            found.append((cells[0].split(". ", 1)[1], re.findall(r"`([\w.]+)`", cells[1])))
    return found


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    """Index (0 = top) of the layer whose longest entry covers `module`; None when none does."""
    best: tuple[int, int] | None = None
    for i, (_, entries) in enumerate(table):
        for e in entries:
            full = "ultracluster" if e == "__init__" else f"ultracluster.{e}"
            if module == full or (e != "__init__" and module.startswith(full + ".")):
                if best is None or len(full) > best[1]:
                    best = (i, len(full))
    return None if best is None else best[0]


def test_the_layers_of_the_design_cover_every_module_once():
    table = layers()
    names = [n for n, _ in table]
    assert RAY_LAYER in names and len(names) >= 8, names
    entries = [e for _, es in table for e in es]
    assert len(entries) == len(set(entries)), "an entry is in two layers"
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    stale = [e for e in entries if ("ultracluster" if e == "__init__" else f"ultracluster.{e}") not in modules]
    assert stale == [], f"docs/design.md names modules that do not exist: {stale}"
    unplaced = sorted(m for m in modules if layer_of(m, table) is None)
    assert unplaced == [], f"place these modules in a layer of docs/design.md: {unplaced}"


def test_a_module_imports_only_its_own_layer_or_lower():
    table, graph = layers(), import_graph()
    upward = sorted(f"{m} ({table[layer_of(m, table)][0]}) imports {d} ({table[layer_of(d, table)][0]})"
                    for m, deps in graph.items() for d in deps if layer_of(d, table) < layer_of(m, table))
    assert upward == []


def test_only_the_ray_adapter_imports_ray():
    table = layers()
    ray_layer = [n for n, _ in table].index(RAY_LAYER)
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "ray" or m.startswith("ray.") for m in mods) and not getattr(node, "level", 0):
                importers.add(_module_name(path))
    assert importers and {m: table[layer_of(m, table)][0] for m in importers if layer_of(m, table) != ray_layer} == {}


def test_every_module_below_the_ray_adapter_imports_without_ray():
    table = layers()
    ray_layer = [n for n, _ in table].index(RAY_LAYER)
    below = sorted(m for m in (_module_name(p) for p in PACKAGE.rglob("*.py")) if layer_of(m, table) > ray_layer)
    assert "ultracluster.emulate" in below and "ultracluster.shards.worker" in below
    code = "import sys\n" + "".join(f"import {m}\n" for m in below) + "print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_emulate_does_not_load_ray():
    code = "import sys\nimport ultracluster.emulate\nprint('ultracluster.emulate' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_no_module_is_long_without_a_reason():
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    long = {p for p, n in lengths.items() if n > MAX_LINES}
    assert long <= set(LONG_MODULES), sorted(long - set(LONG_MODULES))
    assert set(LONG_MODULES) <= set(lengths), "a listed module is gone: drop it from LONG_MODULES"


# The report only reads the replay's typed result (`replay.result`): it never calls back into the replay, the
# emulation or the actors, at module level or inside a function.
REPORT_MAY_NOT_IMPORT = ("ultracluster.replay.engine", "ultracluster.replay.records", "ultracluster.replay.shard_steps",
                         "ultracluster.replay.schedule", "ultracluster.replay.degraded", "ultracluster.emulate",
                         "ultracluster.runner", "ultracluster.actors", "ultracluster.chip")


def test_the_report_reads_the_result_and_never_calls_the_replay():
    graph = import_graph()
    report = {m: deps for m, deps in graph.items() if m == "ultracluster.report" or m.startswith("ultracluster.report.")}
    assert "ultracluster.replay.result" in report["ultracluster.report.summary"]   # the graph sees the report's imports
    bad = {m: sorted(d for d in deps if d.startswith(REPORT_MAY_NOT_IMPORT)) for m, deps in report.items()}
    assert {m: d for m, d in bad.items() if d} == {}


def test_every_subpackage_is_listed_for_the_wheel():
    """pyproject.toml lists the packages (it does not find them): a new subpackage missing there installs
    from a checkout but not from a wheel (tests/cluster_ray/test_cluster_packaging.py builds one)."""
    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert "ultracluster.layouts" in found and found - listed == set(), sorted(found - listed)
