"""xover's own modules import one way: every import counted - at a module's top, inside a function and under
`if TYPE_CHECKING:` alike - no circle, and no import from a lower layer of the house to a higher one.

The graph is read with `ast` (nothing is imported): an edge for every `import` / `from ... import` of an
xover module, and for the packages above it that loading it runs (``xover.run.supervise`` runs
``xover/run/__init__.py``). A module's layer is that of the longest prefix in LAYERS naming it. An import
inside a function is a lazy import: only those in LAZY_IMPORTS may be (each says why); any other is one
that could hide a circle, and is refused.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xover"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _load_time_imports(tree: ast.Module):
    """Import statements that run when the module loads: not inside a function, class body included."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or _is_type_checking(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def _every_import(tree: ast.Module):
    """Every import statement of a module: at its top, in a class, in a function, under TYPE_CHECKING."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def import_graph(every: bool = False) -> dict[str, set[str]]:
    """Each xover module -> the xover modules (and their packages) that loading it loads first; with
    `every`, that any of its imports loads, wherever the import stands."""
    modules = _modules()
    read_imports = _every_import if every else _load_time_imports

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in read_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(node.module, node.level, name, is_package)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in filter(None, map(known, targets)):
                # the target and every package above it, except those this module is inside (loaded already)
                parts = target.split(".")
                for depth in range(1, len(parts) + 1):
                    above = ".".join(parts[:depth])
                    if above in modules and above != name and not name.startswith(above + "."):
                        graph[name].add(above)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_graph_is_read():
    graph = import_graph()
    assert "xover.store.profiles" in graph["xover.plan.step"]
    assert "xover.processes" in graph["xover.turns.service"]
    assert {"xover.emulation", "xover.emulation.cluster"} <= graph["xover.run.reach"]  # the seam; was schedule
    assert not [name for name in graph["xover.run.external.horovodrun"] if name.startswith("xover.emulation")]
    assert {"xover.run", "xover.run.experiment"} <= graph["xover.profile.step"]


def test_xovers_modules_import_one_another_without_a_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_one_list_of_engines():
    """The engines a job file, a plan file, script detection and the workers know are the one registry
    in xover.engines; each engine's halves are found by its name: how its ranks start (run/ranks.py), and
    its worker side's adapter and shim (by its runtime name)."""
    from xover import engines, recipes, scripts
    from xover.plan import planfile
    from xover.run.ranks import ENGINE_RANKS
    from xover.runtime import engines as adapters
    from xover.runtime.script_shim import SHIMS

    assert planfile.ENGINES is scripts.ENGINES is recipes.ENGINES is engines.ENGINES
    assert list(engines.ENGINES) == ["horovod", "torch"]
    assert [adapters.adapter_for(engine.runtime_name) for engine in engines.ENGINES.values()] == [
        adapters.HorovodEngine, adapters.TorchEngine]
    assert list(ENGINE_RANKS) == list(SHIMS) == list(engines.ENGINES)


def test_xovers_rooms_import_one_another_without_a_circle():
    """Rooms (xover/run/, xover/run/external/, xover/plan/step.py, ...) too: a launcher never loads run/ to get a helper."""
    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        room = module.split(".")[1] if "." in module else module
        rooms.setdefault(room, set())
        for target in targets:
            other = target.split(".")[1] if "." in target else target
            if other not in (room, "xover"):
                rooms[room].add(other)
                rooms.setdefault(other, set())
    assert circles(rooms) == []


def _loaded_with(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, pending = set(), [start]
    while pending:
        for target in graph[pending.pop()] - seen:
            seen.add(target)
            pending.append(target)
    return seen


def test_settings_load_nothing_of_xover_but_its_errors():
    """The runtime reads its settings and the launcher's variables from xover.settings, so that module
    must stay a leaf that any room, the workers' included, can load."""
    assert _loaded_with(import_graph(), "xover.settings") <= {"xover.errors"}


def test_the_runtime_loads_nothing_of_the_orchestrator():
    """Inside a worker, xover is the runtime: it knows the orchestrator only through its environment
    (xover.settings names the variables) and the metrics lines it prints."""
    graph = import_graph()
    orchestrator = ("xover.run", "xover.run.external", "xover.store", "xover.plan", "xover.report", "xover.cli",
                    "xover.config", "xover.plan.step", "xover.profile.step", "xover.turns.service", "xover.turns.server")
    for module in (name for name in graph if name.startswith("xover.runtime")):
        loaded = _loaded_with(graph, module)
        assert not [name for name in loaded if name.startswith(orchestrator) and name.split(".")[1] != "runtime"], module


def test_xover_never_imports_the_frameworks_users_scripts_train_with():
    """Lightning, Accelerate and transformers are the users' (an optional extra for the tests): xover only
    names them, in `xover/scripts.py`, to tell a script's engine from its imports."""
    frameworks = ("lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers")
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [])
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in frameworks]
    assert not found

