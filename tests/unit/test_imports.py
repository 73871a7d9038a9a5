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


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, modules: dict) -> list[str]:
    """The xover modules an import statement of module `name` names (a module's attribute: its module)."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = _absolute(node.module, node.level, name, is_package)
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = []
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            found.append(target)
    return found


def import_graph(every: bool = False) -> dict[str, set[str]]:
    """Each xover module -> the xover modules (and their packages) that loading it loads first; with
    `every`, that any of its imports loads, wherever the import stands."""
    modules = _modules()
    read_imports = _every_import if every else _load_time_imports

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in read_imports(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package, modules):
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
    must stay a leaf that any room, the workers' included, can load (its errors mask passwords: redact, a leaf)."""
    assert _loaded_with(import_graph(), "xover.settings") <= {"xover.errors", "xover.redact"}


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


# The house's layers, ground first: a module may import its own layer and those below, never one above.
LAYERS: list[tuple[str, ...]] = [
    # the vocabulary and the leaves every room reads
    ("errors", "settings", "sharing", "console", "redact", "hints", "rates", "links", "hosts", "config", "results",
     "workloads", "engines", "records", "plugins", "writes", "streams", "stop_signals"),
    # what a job is made of, and where it is kept
    ("scripts", "devices", "processes", "recipes", "store"),
    # pure logic: the turn protocol and policies, the planner, a trace's replay
    ("turns.protocol", "turns.policies", "plan", "replay"),
    # inside the workers
    ("runtime",),
    # the launcher's services: turn servers, the emulated cluster and its links
    ("turns", "emulation"),
    # what runs measured
    ("analysis",),
    # running jobs
    ("run",),
    # the commands' libraries and views
    ("profile", "report", "doctor", "views", "replay.step"),
    # the command line
    ("flags", "cli_common", "cli", "cli_cluster", "__main__"),
]

# Imports inside a function that may stay there, each for what loading it at the top would cost.
LAZY_IMPORTS = {
    # torch: a planner that counts a recipe's epochs, and the built-in models' workloads, load it only then
    ("xover.plan.from_profiles", "xover.workloads"),
    ("xover.workloads", "xover.workloads.datasets"),
    ("xover.workloads", "xover.workloads.models"),
    # the command line's start-up: profile, plan, report and doctor load their libraries (matplotlib and
    # MLflow behind the report) when they run, not with every `xover` command
    ("xover.cli", "xover.doctor"),
    # the entry point: Ctrl-C or SIGTERM while the command line loads is one line (its handler comes first)
    ("xover.__main__", "xover.cli"),
    ("xover.cli", "xover.plan.step"),
    ("xover.cli", "xover.profile.step"),
    ("xover.cli", "xover.replay.step"),
    ("xover.cli", "xover.report"),
    ("xover.cli_cluster", "xover.emulation.cluster"),
    # the reaper every run starts: the store and the turn service's folder only when it reaps (xover died)
    ("xover.run.reaper", "xover.run.record"),
    ("xover.run.reaper", "xover.store.models"),
    ("xover.run.reaper", "xover.store.session"),
    ("xover.run.reaper", "xover.turns.service"),
}


def layer_of(module: str) -> int:
    """The layer of a module: that of the longest prefix in LAYERS naming it. A package's own module (its
    __init__.py, which loading any module inside it runs) stands as low as its lowest member."""
    modules = _modules()
    if module in modules and modules[module][1] and module != "xover":
        return min(_named_layer(member) for member in modules if member.startswith(module + "."))
    return _named_layer(module)


def _named_layer(module: str) -> int:
    relative = module.removeprefix("xover.") if module != "xover" else ""
    found = [(len(name), index) for index, names in enumerate(LAYERS) for name in names
             if relative == name or relative.startswith(name + ".")]
    return max(found)[1] if found else len(LAYERS)


def test_every_module_has_a_layer():
    assert [module for module in _modules() if module != "xover" and layer_of(module) == len(LAYERS)] == []


def test_counting_every_import_there_is_no_circle():
    assert circles(import_graph(every=True)) == []


def test_no_import_runs_from_a_lower_layer_up_to_a_higher_one():
    upward = sorted(f"{module} -> {target}" for module, targets in import_graph(every=True).items()
                    for target in targets if module != "xover" and layer_of(target) > layer_of(module))
    assert upward == []


def _in_functions(tree: ast.Module):
    """The import statements inside a function (a type checker's imports under TYPE_CHECKING are not)."""
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (node for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom)))


def _lazy_imports() -> set[tuple[str, str]]:
    """(module, the xover module it imports inside a function), each module as import_graph names it."""
    modules = _modules()
    found = set()
    for name, (path, is_package) in modules.items():
        for node in _in_functions(ast.parse(path.read_text(), str(path))):
            found |= {(name, target) for target in _imported(node, name, is_package, modules)
                      if target.startswith("xover") and target != name and not name.startswith(target + ".")}
    return found


def test_an_import_inside_a_function_is_one_of_the_few_kept_for_start_up():
    assert sorted(_lazy_imports() - LAZY_IMPORTS) == []


def test_the_runtime_never_imports_the_launcher_side_and_the_store_never_the_runtime():
    """Never: runtime -> run, store -> runtime, and run -> emulation but through run/reach.py (the one seam
    that reaches hosts and shapes links)."""
    graph = import_graph(every=True)
    forbidden = []
    for module, targets in graph.items():
        for target in targets:
            if module.startswith("xover.runtime") and target.startswith(("xover.run.", "xover.store")):
                forbidden.append(f"{module} -> {target}")
            if module.startswith("xover.store") and target.startswith("xover.runtime"):
                forbidden.append(f"{module} -> {target}")
            if (module.startswith("xover.run.") and module != "xover.run.reach"
                    and target.startswith("xover.emulation")):
                forbidden.append(f"{module} -> {target}")
    assert forbidden == []


def test_every_test_module_has_a_name_of_its_own():
    """pytest imports test modules by their file name (no packages under tests/): two of one name in two
    folders stop the whole suite's collection, and `make check` (tests/unit only) would not see it."""
    names = [path.name for path in (PACKAGE.parent / "tests").rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []
