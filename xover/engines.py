"""Engines: what starts a job's ranks and averages its gradients - each engine one descriptor in one registry.

    horovod   Horovod under horovodrun (hvd.DistributedOptimizer)
    torch     torch.distributed under torchrun (DistributedDataParallel, and the frameworks that train through it)

An `Engine` here says what an engine *is*, in words and imports; what it *does* lives in two halves,
each found by the engine's name in a registry of its own world:

    here                  name, program (--engine NAME, a job file's and a plan's `engine`), the imports
                          that make a script its own (scripts.py reads them), how messages name it, and
                          `runtime`: the worker-side half it runs with (its own name, or another engine's)
    run/ranks.py          the launcher side: what to refuse or say before its jobs start on this machine,
                          the command lines that start a job's ranks and their environment
    runtime/engines.py    the worker side: the adapter of the built-in models, by `runtime`
    runtime/script_shim.py the shim that adapts it under an unmodified script, by `runtime`
    scripts.py            what can be refused before a script of it runs, by `runtime`

This module loads nothing of xover but its errors, so that every room - the workers' runtime, the planner,
the command line - reads the one registry; neither half is loaded by asking for a name. A new engine is a
descriptor and `register(...)`, with its launcher side registered in run/ranks.py (docs/extending.md).
"""

from __future__ import annotations

import sys

from .errors import XoverError, printable

HOROVOD = "horovod"
TORCH = "torch"
DEFAULT_ENGINE = HOROVOD  # what runs the built-in models unless --engine (or a plan) says otherwise


class Engine:
    """One engine, as words and imports. A subclass sets them."""

    name = ""
    program = ""  # the program that starts its ranks (what --engine's help and the detection note name)
    imports = ""  # how a message names the imports that show it (horovod, torch.distributed)
    imports_in_full = ""  # the same where a refusal lists what a script lacks (default: `imports`)
    kind = ""  # how a script's description names it: "unmodified {kind} script ..."
    script_kind = ""  # what a script of its own is, where the user is asked to choose: "a Horovod script"
    wrapper = ""  # what a script trains through, which its shim adapts (hvd.DistributedOptimizer)
    other_hint = ""  # a refusal's guess when a script may belong to another engine (where other_in_use says so)
    modules: tuple[str, ...] = ()  # dotted prefixes whose import makes a script its own
    frameworks: dict[str, str] = {}  # module prefix -> a framework that trains through this engine
    runtime = ""  # the engine whose worker side (adapter, shim) its workers run: "" for its own

    # -- a script -------------------------------------------------------------------------------
    def framework_of(self, name: str) -> str | None:
        """The framework (`frameworks`) a dotted name belongs to, or None."""
        return next((framework for prefix, framework in self.frameworks.items() if under_module(name, prefix)), None)

    def other_in_use(self) -> bool:
        """In a rank of a script run as this engine's: whether it uses the other engine (other_hint's guess)."""
        return False

    def recognises(self, name: str) -> bool:
        """Whether a dotted name a script uses (aliases resolved) makes it this engine's."""
        return any(under_module(name, prefix) for prefix in self.modules) or self.framework_of(name) is not None

    @property
    def runtime_name(self) -> str:
        """The worker-side half it runs with: `runtime`, or its own name."""
        return self.runtime or self.name


def under_module(name: str, prefix: str) -> bool:
    """Whether a dotted name is the module `prefix` or inside it (horovod.torch.init is under horovod.torch)."""
    return name == prefix or name.startswith(prefix + ".")


# ------------------------------------------------------------------------------ the two engines


class Horovod(Engine):
    """Horovod: ranks started by horovodrun, gradients averaged by hvd.DistributedOptimizer."""

    name = HOROVOD
    program = "horovodrun"
    imports = imports_in_full = "horovod"
    kind = "Horovod"
    script_kind = "a Horovod script"
    wrapper = "hvd.DistributedOptimizer"
    other_hint = "or is it a torch.distributed script? engine torch"
    modules = ("horovod",)

    def other_in_use(self) -> bool:
        """A torch.distributed process group initialised beside Horovod's (a Horovod script has none)."""
        distributed = sys.modules.get("torch.distributed")
        return bool(distributed and distributed.is_available() and distributed.is_initialized())


# frameworks that train through DistributedDataParallel under torchrun: module prefix -> what it is
TORCH_FRAMEWORKS = {
    "lightning": "PyTorch Lightning",  # lightning.pytorch (Trainer), lightning.fabric
    "pytorch_lightning": "PyTorch Lightning",
    "lightning_fabric": "PyTorch Lightning",
    "accelerate": "Hugging Face Accelerate",
    "transformers.Trainer": "the transformers Trainer",  # which trains through Accelerate
    "transformers.Seq2SeqTrainer": "the transformers Trainer",
    "transformers.trainer": "the transformers Trainer",
    "transformers.trainer_seq2seq": "the transformers Trainer",
}


class Torch(Engine):
    """torch.distributed: ranks started by torchrun, a script training through DistributedDataParallel."""

    name = TORCH
    program = "torchrun"
    imports = "torch.distributed"
    imports_in_full = "torch.distributed (DistributedDataParallel)"
    kind = "torch.distributed (DDP)"
    script_kind = "a script that trains through DistributedDataParallel"
    wrapper = "DistributedDataParallel"
    other_hint = "or is it a Horovod script? engine horovod"
    modules = ("torch.distributed", "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed")
    frameworks = TORCH_FRAMEWORKS

    def other_in_use(self) -> bool:
        """Horovod's torch module imported (a DDP script never imports it)."""
        return "horovod.torch" in sys.modules


# ------------------------------------------------------------------------------ the registry

ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Offer an engine to --engine, job files, plans, script detection and the workers, by its name."""
    ENGINES[engine.name] = engine
    return engine


register(Horovod())
register(Torch())


def engine_named(name: str, flag: str = "--engine") -> Engine:
    """The engine of that name; any other is one line naming the choices."""
    if name not in ENGINES:
        raise XoverError(f"{flag} {printable(name)}: choose {' or '.join(ENGINES)}")
    return ENGINES[name]


def engines_help() -> str:
    """'horovod (horovodrun) or torch (torchrun, torch.distributed)': what --engine offers."""
    return " or ".join(
        f"{engine.name} ({engine.program}" + (f", {engine.imports}" if engine.imports != engine.name else "") + ")"
        for engine in ENGINES.values()
    )
