"""Engines: what starts a job's ranks and averages its gradients, each one object in one registry.

    horovod   Horovod under horovodrun (hvd.DistributedOptimizer)
    torch     torch.distributed under torchrun (DistributedDataParallel, and the frameworks that train through it)

An `Engine` is everything xover knows of one engine:

    name, program          --engine NAME (a job file's and a plan's `engine`); the program that starts its ranks
    modules, frameworks    the imports that make a script its own (scripts.py reads a script's imports)
    check_script           what can be refused before a script runs (the rest is refused when met, in its shim)
    check_jobs, warning    what to refuse, or say, before its jobs start on this machine
    launch_commands, launch_env   the command lines that start a job's ranks, and their environment
    adapter                the runtime's adapter for the built-in models (runtime/engines.py)
    install_shim           what adapts it under an unmodified script (runtime/script_shim.py, runtime/ddp_shim.py)

This module loads nothing of xover but its errors, so that every room reads the one registry: the
workers' runtime (xover/runtime/ never loads the orchestrator), the planner, the command line. Each part
that lives in another room is imported where it is used, so the orchestrator never loads torch by
asking for a launch command and a worker never loads run/external/ by asking for its adapter. A new engine is
a class and `register(...)` (docs/extending.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import XoverError

if TYPE_CHECKING:
    from .run.jobs import JobSpec

DEFAULT_ENGINE = "horovod"  # what runs the built-in models unless --engine (or a plan) says otherwise


class Engine:
    """One engine. A subclass sets the names and overrides what its engine does differently."""

    name = ""
    program = ""  # the program that starts its ranks (what --engine's help and the detection note name)
    imports = ""  # how a message names the imports that show it (horovod, torch.distributed)
    imports_in_full = ""  # the same where a refusal lists what a script lacks (default: `imports`)
    kind = ""  # how a script's description names it: "unmodified {kind} script ..."
    script_kind = ""  # what a script of its own is, where the user is asked to choose: "a Horovod script"
    wrapper = ""  # what a script trains through, which its shim adapts (hvd.DistributedOptimizer)
    other_hint = ""  # a refusal's guess when a script may belong to another engine
    modules: tuple[str, ...] = ()  # dotted prefixes whose import makes a script its own
    frameworks: dict[str, str] = {}  # module prefix -> a framework that trains through this engine

    # -- a script -------------------------------------------------------------------------------
    def framework_of(self, name: str) -> str | None:
        """The framework (`frameworks`) a dotted name belongs to, or None."""
        return next((framework for prefix, framework in self.frameworks.items() if _under(name, prefix)), None)

    def recognises(self, name: str) -> bool:
        """Whether a dotted name a script uses (aliases resolved) makes it this engine's."""
        return any(_under(name, prefix) for prefix in self.modules) or self.framework_of(name) is not None

    def check_script(self, script: str | os.PathLike) -> None:
        """Refuse (scripts.ScriptRefused, naming the script) what can be told before the script runs."""

    # -- before its jobs start ------------------------------------------------------------------
    def check_jobs(self, device_kind: str) -> None:
        """Refuse, with one line, what its jobs would each fail on here (device_kind: 'cpu' or 'gpu')."""

    def crossover_warning(self) -> str | None:
        """A warning where its jobs would take crossover turns badly on this machine, or None."""
        return None

    # -- launching ------------------------------------------------------------------------------
    def launch_commands(
        self,
        job: JobSpec,
        log_dir: Path,
        spec_path: Path,
        env: dict[str, str],
        prefix: list[str],
        deadline: float | None = None,
    ) -> list[list[str]]:
        """The command lines that start the job's ranks (one per node where the program needs it),
        each behind `prefix` (how this machine reaches the hosts); `deadline`: time.monotonic() of --timeout."""
        raise NotImplementedError

    def launch_env(self, job: JobSpec, env: dict[str, str]) -> dict[str, str]:
        """The environment its launch commands run with (`env`: the workers')."""
        return env

    def shim_program(self, job: JobSpec) -> list[str] | None:
        """For a script's job: its script under the shim (`python -m xover.runtime.script_shim NAME SCRIPT
        ARGS`, after the interpreter); None for a built-in model (the worker, runtime/worker.py)."""
        return ["-m", "xover.runtime.script_shim", self.name, *job.script] if job.script else None

    # -- inside a worker (these import torch) ---------------------------------------------------
    def adapter(self) -> type:
        """The runtime's adapter class for the built-in models (runtime/engines.py)."""
        raise NotImplementedError

    def install_shim(self, script: str | None) -> Any:
        """Adapt the engine under an unmodified script before it runs; returns its ScriptCoordinator."""
        raise NotImplementedError


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# ------------------------------------------------------------------------------ the two engines


class Horovod(Engine):
    """Horovod: ranks started by horovodrun, gradients averaged by hvd.DistributedOptimizer."""

    name = "horovod"
    program = "horovodrun"
    imports = imports_in_full = "horovod"
    kind = "Horovod"
    script_kind = "a Horovod script"
    wrapper = "hvd.DistributedOptimizer"
    other_hint = "or is it a torch.distributed script? engine torch"
    modules = ("horovod",)

    def launch_commands(self, job, log_dir, spec_path, env, prefix, deadline=None):
        """One horovodrun for every host, over the emulated hosts' interfaces where there are some; the
        metric token and the job file's variables reach the ranks through a private file on each host."""
        from .emulation import cluster
        from .run.external.horovodrun import horovodrun_command, private_variables

        shim = self.shim_program(job)
        return [
            [
                *prefix,
                *horovodrun_command(
                    job.np,
                    job.hosts,
                    log_dir,
                    spec_path,
                    program=[sys.executable, "-u", *shim] if shim else None,
                    interfaces=cluster.host_interfaces(),
                    private=private_variables(env, job.recipe.variable_names),
                    remote_prefix=prefix,
                    deadline=deadline,
                ),
            ]
        ]

    def launch_env(self, job, env):
        """horovodrun copies all of its environment onto its ranks' command lines: an allow-list, without
        the store's URL, the metric token or the job file's variables (run/external/horovodrun.py)."""
        from .run.external.horovodrun import horovodrun_env
        from .settings import SECRET_VARIABLES

        return horovodrun_env(env, (*SECRET_VARIABLES, *job.recipe.variable_names))

    def adapter(self):
        """HorovodEngine."""
        from .runtime.engines import HorovodEngine

        return HorovodEngine

    def install_shim(self, script):
        """Wrap Horovod under the script (runtime/script_shim.py)."""
        from .runtime.script_shim import install_horovod

        return install_horovod(script)


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

    name = "torch"
    program = "torchrun"
    imports = "torch.distributed"
    imports_in_full = "torch.distributed (DistributedDataParallel)"
    kind = "torch.distributed (DDP)"
    script_kind = "a script that trains through DistributedDataParallel"
    wrapper = "DistributedDataParallel"
    other_hint = "or is it a Horovod script? engine horovod"
    modules = ("torch.distributed", "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed")
    frameworks = TORCH_FRAMEWORKS

    def check_script(self, script):
        """Refuse a DDP script that the shim cannot follow (scripts.check_ddp_script)."""
        from .scripts import check_ddp_script

        check_ddp_script(script)

    def check_jobs(self, device_kind):
        """XOVER_TORCH_BACKEND, checked before any torch job starts (the workers would each fail on it)."""
        from .devices import torch_backend

        torch_backend(device_kind == "gpu")

    def crossover_warning(self):
        """On GPUs over NCCL: an NCCL all-reduce waiting for its peer is a kernel that spins on the GPU,
        and the partner's turn is time-sliced with it (docs/measurements.md: a compute-heavy job's
        compute 1.96x, crossover 0.60x of concurrent)."""
        from .devices import local_device_count, torch_backend

        if local_device_count()[0] != "gpu" or torch_backend(on_gpu=True) != "nccl":
            return None
        return (
            "crossover on GPUs over NCCL: a waiting NCCL all-reduce spins on the GPU and slows the partner's "
            "turn (time-slicing); XOVER_TORCH_BACKEND=gloo all-reduces through host memory and leaves the GPU "
            "to the partner (docs/gpu.md)"
        )

    def launch_commands(self, job, log_dir, spec_path, env, prefix, deadline=None):
        """torchrun, one per node (over ssh for other hosts)."""
        from .run.external.torchrun import torchrun_commands

        return [
            [*prefix, *command]
            for command in torchrun_commands(
                job.np,
                job.hosts,
                log_dir,
                spec_path,
                env,
                program=self.shim_program(job),
                remote_prefix=prefix,
                deadline=deadline,
                forward=job.recipe.variable_names,
            )
        ]

    def adapter(self):
        """TorchEngine."""
        from .runtime.engines import TorchEngine

        return TorchEngine

    def install_shim(self, script):
        """Wrap DistributedDataParallel under the script (runtime/ddp_shim.py)."""
        from .runtime.ddp_shim import install_ddp

        return install_ddp(script)


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
        raise XoverError(f"{flag} {name}: choose {' or '.join(ENGINES)}")
    return ENGINES[name]


def engines_help() -> str:
    """'horovod (horovodrun) or torch (torchrun, torch.distributed)': what --engine offers."""
    return " or ".join(
        f"{engine.name} ({engine.program}" + (f", {engine.imports}" if engine.imports != engine.name else "") + ")"
        for engine in ENGINES.values()
    )
