"""A user's training script, read (never run): its engine, what crossover cannot follow, its content hash.

The engine comes from what the script imports, and what the modules next to it that it imports do,
as each engine of the registry (xover/engines.py) recognises its own: horovod (``import horovod.torch as
hvd``) makes a Horovod script, run under horovodrun (engine "horovod"); torch.distributed (``import
torch.distributed as dist``, ``DistributedDataParallel``), or a framework that trains through
DistributedDataParallel (PyTorch Lightning, Hugging Face Accelerate, the ``transformers`` Trainer:
``engines.TORCH_FRAMEWORKS``), without horovod makes a torch script, run under torchrun (engine
"torch"). Both, or neither: the user says which (``--engine``, or ``engine`` in a job file).
Where the source cannot tell whether DDP is built (a library from elsewhere builds it), the DDP shim
sees it built when the script runs, whoever builds it, and refuses a step taken without it.

Pure: no torch, no launcher. The launcher-side commands use it before anything starts, and the DDP
shim inside each worker checks the script with it again before the script runs.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .engines import ENGINES, HOROVOD, TORCH, TORCH_FRAMEWORKS, engine_named, under_module
from .errors import XoverError, is_utf8, printable
from .redact import mask_word

FRAMEWORKS = TORCH_FRAMEWORKS  # frameworks that train through DistributedDataParallel: module prefix -> what it is
# why a framework found in a script may not have built DDP (the shim's refusal of a step without it)
FRAMEWORK_HINTS = {
    "Hugging Face Accelerate": "on a CPU Accelerate trains in several processes only with Accelerator(cpu=True) or "
    "ACCELERATE_USE_CPU=1, otherwise each rank trains alone",
    "the transformers Trainer": "on a CPU it trains in several processes only with TrainingArguments(use_cpu=True)",
    "PyTorch Lightning": 'use Trainer(strategy="ddp"); ddp_spawn, FSDP and DeepSpeed are not followed',
}
# the framework setting that registers a DDP communication hook, for a refusal where the framework, not the
# script, registered it
FRAMEWORK_COMM_HOOKS = {
    "Hugging Face Accelerate": "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook=..., "
    "comm_wrapper=...)])",
    "PyTorch Lightning": "DDPStrategy(ddp_comm_hook=..., ddp_comm_wrapper=..., model_averaging_period=...)",
}
ENTRY_POINTS = ("Trainer", "Seq2SeqTrainer", "Accelerator", "Fabric")  # what a note names, where the script uses it

# names whose use makes a DDP script impossible to cross over, and why
DDP_UNSUPPORTED_NAMES = {
    "register_comm_hook": "registers another DDP communication hook (its own, or DDP's optimizer in backward); "
    "crossover needs that hook to start each bucket's all-reduce without waiting: remove it to "
    "run the script under xover",
    "_register_builtin_comm_hook": "registers a built-in DDP communication hook; crossover needs that hook to start "
    "each bucket's all-reduce without waiting: remove it to run the script "
    "under xover",
    "SyncBatchNorm": "uses SyncBatchNorm, whose collectives run inside forward and backward and would hold the turn "
    "through communication: use BatchNorm (DDP broadcasts its statistics) to run it "
    "under xover",
    **{
        name: f"shards its model with {what} ({name}), whose all-gathers and reduce-scatters run inside forward and "
        "backward and would hold the turn through communication; crossover takes turns around DDP's gradient "
        "all-reduces: wrap the model in DistributedDataParallel to run it under xover"
        for name, what in (("FullyShardedDataParallel", "FSDP"), ("fully_shard", "FSDP2"))
    },
}

# torch.distributed's names (their module: what is refused where the script uses them outside any `if`) that a DDP
# script cannot be crossed over with, and why
DDP_UNSUPPORTED_TORCH = {
    ("torch.distributed.algorithms", "Join"): "trains its DDP model inside Join (torch.distributed.algorithms.join), "
    "whose collectives the turns cannot follow: every forward all-reduces whether a rank still has inputs, and a "
    "rank that ran out shadows its peers' all-reduces outside any forward and backward; give every rank the same "
    "number of batches (DistributedSampler(..., drop_last=True)) and leave Join out to run it under xover",
}

# libraries that reduce the gradients their own way, which no engine's shim follows: module -> why, what to do
UNFOLLOWED_TRAINERS = {
    "deepspeed": "trains through DeepSpeed (deepspeed.initialize), whose engine reduces the gradients itself (its own "
    "buckets, ZeRO's partitions): crossover takes turns around DDP's and Horovod's gradient all-reduces; "
    "wrap the model in DistributedDataParallel to run it under xover",
}


def _unfollowed_trainer(dotted: list[str], used: set[str] | None = None) -> str | None:
    """Why a script that trains through a library no shim follows cannot be crossed over (its `initialize` called,
    outside any `if` where `used` is given: a script that also trains through DDP behind a flag is left to run)."""
    for library, problem in UNFOLLOWED_TRAINERS.items():
        if f"{library}.initialize" in dotted and (used is None or "initialize" in used):
            return problem
    return None


class ScriptRefused(XoverError):
    """A script that cannot run in a crossover group under its engine."""


@dataclass(frozen=True)
class ScriptEngine:
    """A script's engine, the name that gave it away (e.g. torch.distributed), and the framework it
    trains with where it uses one (e.g. Hugging Face Accelerate)."""

    script: str
    engine: str
    evidence: str
    framework: str | None = None


@dataclass
class ScriptNames:
    """What a script and its local modules use: dotted names (aliases resolved) and plain names."""

    dotted: list[str] = field(default_factory=list)
    plain: set[str] = field(default_factory=set)
    # of the plain names, those used outside any `if` (nor imported only), and in a module the script imports
    # outside its functions too: what the script does whatever its flags
    unconditional: set[str] = field(default_factory=set)


# the name a job file may give a job (recipes.py); a `--script`'s job is named after its file, so its file name too
JOB_NAME_CHARS = 200  # the store's column; a second copy's mark (name#2) counts too (run/jobs.py)
JOB_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{JOB_NAME_CHARS - 1}}}", re.ASCII)


def copy_name(name: str, copy: int) -> str:
    """The name of the `copy`-th (2, 3, ...) copy of job `name` in a group or plan: name#2. One too long to take its
    mark is refused here, before anything runs or is written."""
    named = f"{name}#{copy}"
    if len(named) > JOB_NAME_CHARS:
        raise XoverError(
            f"job {name[:40]!r}... ({len(name)} characters) is given more than once, and its copy's name "
            f"({len(named)} characters, name#{copy}) is over the {JOB_NAME_CHARS} a job's name may have: rename its "
            f"file or recipe to at most {JOB_NAME_CHARS - len(named) + len(name)} characters"
        )
    return named


def script_problem(script: str | os.PathLike) -> str | None:
    """What keeps `script` (as `--script` gives it) from being run as a job, in words that say what to do: not a
    regular file (a folder, a pipe, nothing there), a path the store cannot keep, or a file name that cannot name
    its job; None when it can run."""
    path = Path(script)
    try:
        if path.is_dir():
            return "a folder, not a file: give the training script's .py file"
        if path.exists() and not path.is_file():
            return "not a regular file (a pipe, a socket or a device): give the training script's .py file"
        if not path.is_file():
            dangling = (
                " (a symbolic link to nothing)" if path.is_symlink() else _arguments_hint(script) or module_hint(script)
            )
            return f"file not found{dangling}"
        if path.suffix == ".toml":  # its engine was looked for in its imports
            return "a TOML file (a recipe or job file), not a script: give it without --script, as an argument"
        resolved = path.resolve()
    except OSError as error:  # a name too long for the system
        return f"cannot be looked at: {error.strerror}"
    if not is_utf8(resolved):
        where = "" if str(resolved) == str(script) else f" ({printable(resolved)})"
        return f"its path{where} is not valid UTF-8, and the store keeps it as text: rename the file or its folder"
    if not JOB_NAME.fullmatch(resolved.stem):
        return (
            f"its file name makes the job's name ({printable(resolved.stem)!r}), which names log folders and plan "
            "entries: it must be ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
            f"(at most {JOB_NAME_CHARS}); "
            "rename the file, or give it a job file with its own `name` (docs/reference.md: Job files)"
        )
    return None


def _arguments_hint(script: str | os.PathLike) -> str:
    """Where a path not found is a script and its arguments in one word (`--script "train.py --epochs 4"`), how
    to give them; else nothing."""
    first, _, rest = str(script).strip().partition(" ")
    if not rest or not Path(first).is_file():
        return ""
    return (
        f" ({printable(first)} is, with arguments after it: give the arguments after -- to every script, "
        f"`--script {printable(first)} -- {printable(rest.strip())}`, or each script's in its job file's `args`, "
        "docs/reference.md: Job files)"
    )


# a module's dotted name, as `python -m` takes it
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)


def module_hint(script: str | os.PathLike) -> str:
    """Where `--script` names a module (`pkg.train`, as `python -m pkg.train` runs it), or is `-m` itself, how to
    run it: a launcher runs a file, so a two-line wrapper runs the module; else nothing."""
    name = str(script).strip()
    if name == "-m":
        return (
            " (`-m`: --script takes a script's file, not `python -m MODULE`; for a module, give a file of two lines, "
            '`import runpy` and `runpy.run_module("pkg.train", run_name="__main__")`, with --engine)'
        )
    if name.endswith(".py") or not _MODULE_NAME.fullmatch(name):
        return ""
    return (
        f" (if {name} is a module, as `python -m {name}` runs it: --script takes a file; give "
        f"{name.replace('.', '/')}.py, or a file of two lines, `import runpy` and "
        f'`runpy.run_module("{name}", run_name="__main__")`, with --engine)'
    )


def content_hash(script: str | os.PathLike) -> str:
    """The script's content hash: a changed script is a different job (profiled again, its measurements of
    sharing no longer used). It counts the local modules the script imports too (`local_modules`: an edited
    model.py beside train.py is another job); a script that imports none of its own hashes as its bytes alone,
    as before they were counted, so that its stored profiles and measurements still hold."""
    path = Path(script)
    try:
        digest = hashlib.sha256(path.read_bytes())
        modules = local_modules(path)
        if modules:
            folder = path.resolve().parent
            for module in modules:
                named = os.path.relpath(module, folder)  # where it lies beside the script, not the folder's path
                digest.update(f"\0{named}\0{hashlib.sha256(module.read_bytes()).hexdigest()}".encode())
    except OSError as error:
        raise XoverError(f"{script}: cannot read the script or a module it imports: {error.strerror}") from None
    return digest.hexdigest()[:16]


MAX_LOCAL_MODULES = 1000  # followed at most: a script's own modules are a handful; a bound on a huge tree


def local_modules(script: str | os.PathLike) -> list[Path]:
    """The modules of its own a script imports, and those they import in turn, sorted: found as `python
    script.py` finds them (beside the script, and a package's relative imports inside it), read, never run.
    Not seen: a module imported by a computed name (importlib) or from a folder added to sys.path; one that
    does not parse counts by its bytes, what it imports unfollowed. An unreadable one raises its OSError."""
    found = []
    for module in list(_script_modules(script))[1:]:  # the first is the script
        if isinstance(module.problem, OSError):
            raise module.problem
        found.append(module.path)
    return sorted(found)


@dataclass
class _ReadModule:
    """A file `_script_modules` reached: its parsed tree, or why it has none."""

    path: Path  # resolved
    tree: ast.Module | None
    problem: OSError | SyntaxError | ValueError | None = None


def _script_modules(script: str | os.PathLike) -> Iterator[_ReadModule]:
    """The script, then the modules of its own it imports and those they import in turn, each once, depth
    first in the order the script reaches them (`_imported_files`: as `python script.py` finds them), at most
    MAX_LOCAL_MODULES more. One that cannot be read or parsed is yielded with its problem, its imports
    unfollowed. The one walk behind a script's content hash (`local_modules`) and what it uses
    (`script_names`)."""
    start = Path(script).resolve()
    folder = start.parent
    seen: set[Path] = set()
    pending = [start]
    while pending and len(seen) <= MAX_LOCAL_MODULES:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError) as problem:  # ValueError: a NUL byte
            yield _ReadModule(path, None, problem)
            continue
        yield _ReadModule(path, tree)
        pending.extend(module.resolve() for module in reversed(_imported_files(tree, folder, path.parent)))


def _imported_files(tree: ast.AST, folder: Path, here: Path) -> list[Path]:
    """The files beside the script (`folder`) or, for a relative import, in the importing module's package
    (`here`) that a module's imports name: each dotted name's packages and the module itself."""
    files = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            base, names = folder, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(here.parts):
                continue
            base = folder if not node.level else here.parents[node.level - 2] if node.level > 1 else here
            prefix = f"{node.module}." if node.module else ""
            names = [node.module] if node.module else []
            names += [f"{prefix}{alias.name}" for alias in node.names if alias.name != "*"]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):  # `import pkg.sub` runs pkg/__init__.py too
                file = local_module(base, ".".join(parts[:depth]))
                if file is not None:
                    files.append(file)
    return files


def check_engine(engine: str, flag: str = "--engine") -> str:
    """The engine's name, if the registry (xover/engines.py) has it; else one line naming the choices."""
    return engine_named(engine, flag).name


# ------------------------------------------------------------------------------ reading a script


def engine_of(name: str) -> str | None:
    """The engine a dotted name belongs to (the first of the registry that recognises it): horovod,
    torch (torch.distributed, DDP, or a framework that trains through DDP), or None."""
    return next((engine.name for engine in ENGINES.values() if engine.recognises(name)), None)


def framework_of(name: str) -> str | None:
    """The framework (an engine's `frameworks`) a dotted name belongs to, or None."""
    return next(filter(None, (engine.framework_of(name) for engine in ENGINES.values())), None)


def _all_frameworks() -> str:
    return ", ".join(sorted({framework for engine in ENGINES.values() for framework in engine.frameworks.values()}))


def script_framework(names: list[str]) -> tuple[str, str] | None:
    """(framework, the name that shows it best: its entry point where used, e.g. lightning.pytorch.Trainer,
    else the first) for a script's dotted names, or None."""
    found = [(framework, name) for name in names if (framework := framework_of(name)) is not None]
    if not found:
        return None
    first = found[0][0]
    entry = [name for framework, name in found if framework == first and name.rsplit(".", 1)[-1] in ENTRY_POINTS]
    return first, (entry or [found[0][1]])[0]


def names_in(tree: ast.AST) -> list[str]:
    """The dotted names a module imports and uses, aliases resolved (``dist.all_reduce`` after
    ``import torch.distributed as dist`` is torch.distributed.all_reduce)."""
    aliases: dict[str, str] = {}
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.append(alias.name)
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # `import torch.distributed` binds torch
                    root = alias.name.split(".", 1)[0]
                    aliases.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            for alias in node.names:
                if alias.name == "*":
                    continue
                full = f"{node.module}.{alias.name}"
                names.append(full)
                aliases[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain is not None:
                root, _, rest = chain.partition(".")
                if root in aliases:
                    names.append(f"{aliases[root]}.{rest}")
    return names


def _used_name(node: ast.AST) -> str | None:
    """The bare name or attribute a node uses, if it is one."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _plain_names(tree: ast.AST) -> set[str]:
    """Every bare name, attribute and imported name (the last part of a dotted import)."""
    plain: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            plain.update(alias.name.rsplit(".", 1)[-1] for alias in node.names)
        elif (name := _used_name(node)) is not None:
            plain.add(name)
    return plain


def _unconditional_names(tree: ast.AST, functions_run: bool = True) -> set[str]:
    """The bare names and attributes used outside the branches of any `if`, conditional expression or
    `match`: a script that converts its model to SyncBatchNorm only `if args.sync_bn:` (torchvision's
    reference scripts) does not use it unless asked to, and the shim refuses it where it is used. A
    script's functions are taken as run (its `main()`); a module it imports (`functions_run=False`) runs
    only its top level on import, and a helper of its that is never called is no use of what it names."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        branches: list = []
        if not functions_run and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            guarded.update(id(inner) for inner in ast.walk(node) if inner is not node)
        elif isinstance(node, ast.If):
            branches = [*node.body, *node.orelse]
        elif isinstance(node, ast.IfExp):
            branches = [node.body, node.orelse]
        elif isinstance(node, ast.Match):
            branches = [statement for case in node.cases for statement in case.body]
        for branch in branches:
            guarded.update(id(inner) for inner in ast.walk(branch))
    # a name imported under another (`from torch.distributed.fsdp import FullyShardedDataParallel as FSDP`)
    # is used by that one: `FSDP(model)` uses FullyShardedDataParallel
    imported_as = {
        alias.asname: alias.name.rsplit(".", 1)[-1]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if alias.asname
    }
    names = {name for node in ast.walk(tree) if id(node) not in guarded and (name := _used_name(node)) is not None}
    return names | {imported_as[name] for name in names if name in imported_as}


def _chain(node: ast.Attribute) -> str | None:
    """a.b.c for an attribute chain on a plain name; None for anything else (calls, subscripts)."""
    parts = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return ".".join([current.id, *reversed(parts)])


def local_module(folder: Path, module: str) -> Path | None:
    """The file of `module` next to a script (how `python script.py` would find it first)."""
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def script_names(script: str | os.PathLike, error: type[XoverError] = XoverError) -> ScriptNames:
    """The names a script and the modules of its own it imports use, each module read once, as `python
    script.py` finds them (`_script_modules`, the walk behind the content hash too): by absolute name from the
    script's folder, whichever module imports them, the packages on the way, and a package's relative imports
    inside it. Depth first, so the first name that shows an engine is the one the script reaches first."""
    found = ScriptNames()
    folder = Path(script).resolve().parent
    for index, read in enumerate(_script_modules(script)):
        module = f" its module {os.path.relpath(read.path, folder)}:" if index else ""  # one the user did not name
        problem = read.problem
        if isinstance(problem, OSError):
            raise error(f"--script {script}:{module} cannot read it: {problem.strerror}") from None
        if problem is not None or read.tree is None:
            lineno = getattr(problem, "lineno", None)  # a SyntaxError's; a ValueError (a NUL byte) has none
            where = f" line {lineno}:" if lineno else ""
            raise error(
                f"--script {script}:{module}{where} not valid Python: {getattr(problem, 'msg', problem)}"
            ) from None
        found.dotted += names_in(read.tree)
        found.plain |= _plain_names(read.tree)
        found.unconditional |= _unconditional_names(read.tree, functions_run=not index)
    return found


# ------------------------------------------------------------------------------ the engine


def engines_in_source(source: str, filename: str = "<script>") -> dict[str, str]:
    """engine -> the first name that shows it, for one module's text (nothing followed, nothing run)."""
    names = names_in(ast.parse(source, filename=filename))
    return _engines(names)


def _engines(names: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in names:
        engine = engine_of(name)
        if engine is not None:
            found.setdefault(engine, name)
    return found


def engine_from_source(source: str, script: str = "<script>") -> ScriptEngine:
    """The engine of one script's text; both or neither is an error naming the script."""
    names = names_in(ast.parse(source, filename=script))
    return _decide(script, _engines(names), script_framework(names), _unfollowed_trainer(names))


def script_engines(script: str | os.PathLike, error: type[XoverError] = XoverError) -> dict[str, str]:
    """engine -> the first name that shows it, in a script file and the modules next to it that it imports."""
    return _engines(script_names(script, error).dotted)


def detect_engine(script: str | os.PathLike) -> ScriptEngine:
    """The engine of a script file, from its imports and those of the modules next to it that it imports."""
    names = script_names(script).dotted
    return _decide(str(script), _engines(names), script_framework(names), _unfollowed_trainer(names))


def detect_scripts_engine(scripts: list[str]) -> tuple[str, list[ScriptEngine]]:
    """One engine for scripts given together on the command line (one `--engine` covers them): each
    script's, which must agree."""
    found = []
    for script in scripts:
        if (problem := script_problem(script)) is not None:
            raise XoverError(f"--script {mask_word(printable(script))}: {problem}")  # a URL pasted as one
        found.append(detect_engine(script))
    engines = {item.engine for item in found}
    if len(engines) > 1:
        described = "; ".join(f"{item.script}: {item.engine} ({item.evidence})" for item in _distinct(found))
        raise XoverError(
            f"the scripts need different engines ({described}); give them one job file each "
            "(each with its own engine), or pass --engine"
        )
    return found[0].engine, found


def detection_note(found: list[ScriptEngine]) -> str:
    """The line saying which engine was found for which script."""
    engine = found[0].engine
    scripts = ", ".join(
        f"{item.script} imports {item.evidence}"
        + (f" ({item.framework}, which trains through {engine_named(item.engine).wrapper})" if item.framework else "")
        for item in _distinct(found)
    )
    return f"engine {engine} ({engine_named(engine).program}): {scripts} (--engine to choose another)"


def _distinct(found: list[ScriptEngine]) -> list[ScriptEngine]:
    return list({item.script: item for item in found}.values())


def _decide(
    script: str, engines: dict[str, str], framework: tuple[str, str] | None = None, unfollowed: str | None = None
) -> ScriptEngine:
    if len(engines) > 1:
        found = [(ENGINES[name], engines[name]) for name in ENGINES if name in engines]  # in the registry's order
        shown = " and ".join(f"{engine.imports} ({evidence})" for engine, evidence in found)
        raise XoverError(
            f"--script {script}: imports {'both' if len(found) == 2 else 'each of'} {shown}, so its "
            f"engine cannot be told: pass {' or '.join(f'--engine {engine.name}' for engine, _ in found)}"
        )
    if not engines and unfollowed is not None:
        raise XoverError(f"--script {script}: {unfollowed}")
    if not engines:
        raise XoverError(
            f"--script {script}: imports neither "
            f"{' nor '.join(engine.imports_in_full or engine.imports for engine in ENGINES.values())}, "
            f"nor a framework that trains through it ({_all_frameworks()}), so its engine cannot be "
            "told: pass " + " or ".join(f"--engine {engine.name} ({engine.script_kind})" for engine in ENGINES.values())
        )
    [(engine, evidence)] = engines.items()
    if framework is not None and ENGINES[engine].framework_of(framework[1]) is not None:
        return ScriptEngine(script, engine, framework[1], framework[0])  # the framework says more than DDP does
    return ScriptEngine(script, engine, evidence)


# ------------------------------------------------------------------------------ what crossover cannot follow


def check_ddp_script(script: str | os.PathLike) -> None:
    """Refuse a script that cannot be crossed over as a DDP script; the message names the script.

    A Horovod script (horovod, and nothing of torch.distributed nor of a framework that builds DDP) is
    refused here; where the source does not show DDP otherwise (it is built by a library from elsewhere),
    the shim sees whether it is built when the script runs."""
    found = script_names(script, ScriptRefused)
    names = found.plain
    engines = _engines(found.dotted)
    horovod = engines.get("horovod") if len(engines) == 1 else None  # the only engine the script shows
    if "DistributedDataParallel" not in names and horovod is not None:
        raise ScriptRefused(
            f"--script {script}: no DistributedDataParallel in the script (nor in a module next to "
            f"it that it imports, nor {', '.join(sorted(set(FRAMEWORKS.values())))}), and it "
            f"imports {horovod}; --engine torch crosses over DDP scripts: wrap the model "
            f"in torch.nn.parallel.DistributedDataParallel (a Horovod script runs with --engine "
            f"horovod)"
        )
    if (problem := _unfollowed_trainer(found.dotted, found.unconditional)) is not None:
        raise ScriptRefused(f"--script {script}: {problem}")
    for name, problem in DDP_UNSUPPORTED_NAMES.items():
        if name in found.unconditional:  # one behind a flag is refused by the shim if the flag is given
            raise ScriptRefused(f"--script {script}: {problem}")
    for (module, name), problem in DDP_UNSUPPORTED_TORCH.items():
        of_torch = any(under_module(used, module) and used.endswith(f".{name}") for used in found.dotted)
        if of_torch and name in found.unconditional:  # another library's Join is not torch's
            raise ScriptRefused(f"--script {script}: {problem}")


# Horovod's bindings of other frameworks, and its launchers that start their own workers: a script of one of
# them has no hvd.DistributedOptimizer of horovod.torch for the turns to hold (a Keras script was launched and
# failed in its ranks with "No module named 'tensorflow'", or would have run without turns where it is installed)
HOROVOD_OTHER_BINDINGS = {
    "horovod.tensorflow": "Horovod's TensorFlow binding",
    "horovod.keras": "Horovod's Keras binding",
    "horovod.mxnet": "Horovod's MXNet binding",
    "horovod.spark": "Horovod on Spark, which starts its own workers",
    "horovod.ray": "Horovod on Ray, which starts its own workers",
}


# horovod.torch's names whose use makes a Horovod script impossible to cross over, and why
HOROVOD_UNSUPPORTED_NAMES = {
    "SyncBatchNorm": "uses hvd.SyncBatchNorm, whose all-gathers (in forward) and all-reduces (in backward) run "
    "inside the model's step and would hold the turn through communication (it also takes GPU tensors only): use "
    "torch.nn.BatchNorm (each rank normalises over its own batch) to run it under xover",
}


def check_horovod_script(script: str | os.PathLike) -> None:
    """Refuse a Horovod script that trains through another binding than horovod.torch (TensorFlow, Keras, MXNet)
    or through Horovod's Spark or Ray launchers, and uses horovod.torch nowhere: xover takes turns in PyTorch.
    Refuse one that uses hvd.SyncBatchNorm outside any `if` (behind one, the shim refuses it when built)."""
    found = script_names(script, ScriptRefused)
    if any(under_module(name, "horovod.torch") for name in found.dotted):
        for name, problem in HOROVOD_UNSUPPORTED_NAMES.items():
            of_horovod = any(under_module(used, "horovod.torch") and used.endswith(f".{name}") for used in found.dotted)
            if of_horovod and name in found.unconditional:
                raise ScriptRefused(f"--script {script}: {problem}")
        return
    for name in found.dotted:
        binding = next((prefix for prefix in HOROVOD_OTHER_BINDINGS if under_module(name, prefix)), None)
        if binding is not None:
            raise ScriptRefused(
                f"--script {script}: imports {name} ({HOROVOD_OTHER_BINDINGS[binding]}); xover takes turns in "
                "PyTorch training launched by horovodrun or torchrun: a Horovod script trains through horovod.torch "
                "(hvd.DistributedOptimizer), a DDP script through torch.nn.parallel.DistributedDataParallel"
            )


# what can be refused before a script runs, by the worker side its engine runs (the rest is refused when
# met, in the shims): a DDP script's shim cannot follow everything (check_ddp_script), nor Horovod's another
# framework's training (check_horovod_script)
SCRIPT_CHECKS: dict[str, Callable[[str | os.PathLike], None]] = {
    TORCH: check_ddp_script,
    HOROVOD: check_horovod_script,
}


def check_script(script: str | os.PathLike, engine: str) -> None:
    """What can be told before the script runs, for its engine (the rest is refused when met, in the shims)."""
    check = SCRIPT_CHECKS.get(engine_named(engine).runtime_name)
    if check is not None:
        check(script)
