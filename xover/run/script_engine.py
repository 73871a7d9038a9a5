"""The engine of an unmodified training script, found from what it imports (never by running it).

A script that imports horovod (``import horovod.torch as hvd``, ``from horovod import torch``) is a
Horovod script: it runs under horovodrun (engine "horovod"). One that uses torch.distributed
(``import torch.distributed as dist``, ``from torch.nn.parallel import DistributedDataParallel``,
``torch.nn.parallel.DistributedDataParallel(...)``) and not horovod is a torch script: torchrun
(engine "torch"). What the script's own modules next to it import counts too (as for
`check_ddp_script`). Both, or neither: the user says which with --engine.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import XoverError

ENGINE_LAUNCHERS = {"horovod": "horovodrun", "torch": "torchrun"}
TORCH_DISTRIBUTED = ("torch.distributed", "torch.nn.parallel.DistributedDataParallel",
                     "torch.nn.parallel.distributed")


@dataclass(frozen=True)
class ScriptEngine:
    """A script's engine, and the name that gave it away (e.g. torch.distributed)."""

    script: str
    engine: str
    evidence: str


def engine_of(name: str) -> str | None:
    """The engine a dotted name belongs to: horovod, torch (torch.distributed or DDP), or None."""
    if name == "horovod" or name.startswith("horovod."):
        return "horovod"
    if any(name == prefix or name.startswith(prefix + ".") for prefix in TORCH_DISTRIBUTED):
        return "torch"
    return None


def names_in(tree: ast.AST) -> tuple[list[str], list[str]]:
    """The dotted names a module imports and uses, aliases resolved (``dist.all_reduce`` after
    ``import torch.distributed as dist`` is torch.distributed.all_reduce); and the modules it
    imports by absolute name (where local ones are looked for)."""
    aliases: dict[str, str] = {}
    names: list[str] = []
    modules: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.append(alias.name)
                modules.append(alias.name)
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # `import torch.distributed` binds torch
                    root = alias.name.split(".", 1)[0]
                    aliases.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
            names.append(node.module)
            for alias in node.names:
                if alias.name == "*":
                    continue
                full = f"{node.module}.{alias.name}"
                names.append(full)
                modules.append(full)  # `from pkg import module`
                aliases[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain is not None:
                root, _, rest = chain.partition(".")
                if root in aliases:
                    names.append(f"{aliases[root]}.{rest}")
    return names, modules


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


def engines_in_source(source: str, filename: str = "<script>") -> dict[str, str]:
    """engine -> the first name that shows it, for one module's text (nothing followed, nothing run)."""
    names, _ = names_in(ast.parse(source, filename=filename))
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
    return _decide(script, engines_in_source(source, script))


def detect_engine(script: str | os.PathLike) -> ScriptEngine:
    """The engine of a script file, from its imports and those of the modules next to it that it imports."""
    return _decide(str(script), _engines(_names_of_file(Path(script), set())))


def detect_scripts_engine(scripts: list[str]) -> tuple[str, list[ScriptEngine]]:
    """One engine for the scripts of a group (its jobs run under one engine): each script's, which
    must agree."""
    found = []
    for script in scripts:
        if not Path(script).is_file():
            raise XoverError(f"--script {script}: file not found")
        found.append(detect_engine(script))
    engines = {item.engine for item in found}
    if len(engines) > 1:
        described = "; ".join(f"{item.script}: {item.engine} ({item.evidence})" for item in _distinct(found))
        raise XoverError(f"the scripts need different engines ({described}); the jobs of a group run under one "
                         "engine: run them in separate groups, or pass --engine")
    return found[0].engine, found


def detection_note(found: list[ScriptEngine]) -> str:
    """The line saying which engine was found for which script."""
    engine = found[0].engine
    scripts = ", ".join(f"{item.script} imports {item.evidence}" for item in _distinct(found))
    return f"engine {engine} ({ENGINE_LAUNCHERS[engine]}): {scripts} (--engine to choose another)"


def _distinct(found: list[ScriptEngine]) -> list[ScriptEngine]:
    return list({item.script: item for item in found}.values())


def _decide(script: str, engines: dict[str, str]) -> ScriptEngine:
    if len(engines) == 2:
        raise XoverError(f"--script {script}: imports both horovod ({engines['horovod']}) and torch.distributed "
                         f"({engines['torch']}), so its engine cannot be told: pass --engine horovod or --engine torch")
    if not engines:
        raise XoverError(f"--script {script}: imports neither horovod nor torch.distributed (DistributedDataParallel), "
                         "so its engine cannot be told: pass --engine horovod (a Horovod script) or --engine torch "
                         "(a DistributedDataParallel script)")
    [(engine, evidence)] = engines.items()
    return ScriptEngine(script, engine, evidence)


def _names_of_file(path: Path, seen: set[Path]) -> list[str]:
    from ..runtime.ddp_shim import _local_module  # where check_ddp_script looks for the script's own modules

    resolved = path.resolve()
    if resolved in seen:
        return []
    seen.add(resolved)
    try:
        tree = ast.parse(resolved.read_bytes(), filename=str(path))
    except OSError as error:
        raise XoverError(f"--script {path}: cannot read it: {error.strerror}") from None
    except (SyntaxError, ValueError) as error:
        where = f" line {error.lineno}:" if getattr(error, "lineno", None) else ""
        raise XoverError(f"--script {path}:{where} not valid Python: {getattr(error, 'msg', error)}") from None
    names, modules = names_in(tree)
    for module in modules:
        local = _local_module(resolved.parent, module)
        if local is not None:
            names += _names_of_file(local, seen)
    return names
