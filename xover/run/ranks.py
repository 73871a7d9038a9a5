"""The launcher side of each engine: what to refuse or say before its jobs start on this machine, and the
command lines that start a job's ranks, with their environment. Each engine's is one object registered by
the engine's name (the engine itself, in words, is in xover/engines.py; its worker side in xover/runtime/).

    horovod   one horovodrun for every host (over the emulated hosts' NICs where there are some); the metric
              token and the job file's variables reach the ranks through a private file on each host
    torch     one torchrun per node, over ssh for other hosts
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from ..devices import local_device_count, torch_backend
from ..engines import ENGINES, HOROVOD, TORCH
from ..errors import XoverError
from ..hosts import is_local
from ..settings import SECRET_VARIABLES
from ..sharing import turn_taking
from .external.horovodrun import horovodrun_command, horovodrun_env, private_variables
from .external.torchrun import torchrun_commands
from .jobs import JobSpec
from .reach import host_interfaces

# Linux's MAX_ARG_STRLEN: the longest one argument of execve, here horovodrun's `/bin/sh -c LINE` of a rank; the
# margin is what the line holds besides the script's words and the forwarded variables (the interpreter and the
# shim, horovodrun's own HOROVOD_* rendezvous variables, a job file's private-file reader: about 3 KiB)
MAX_SHELL_LINE = 131072
SHELL_LINE_MARGIN = 8192


class EngineRanks:
    """How one engine's ranks are started from this machine. A subclass names its engine and builds its
    command lines."""

    engine = ""  # the engine's name (xover/engines.py)

    def check_jobs(self, device_kind: str) -> None:
        """Refuse, with one line, what its jobs would each fail on here (device_kind: 'cpu' or 'gpu')."""

    def check_job(self, job: JobSpec) -> None:
        """Refuse, with one line, what this one job would fail on (its hosts, its folder)."""

    def crossover_warning(self) -> str | None:
        """A warning where its jobs would take crossover turns badly on this machine, or None."""
        return None

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
        """For a script's job: its script under the shim of the engine's worker side (`python -m
        xover.runtime.script_shim RUNTIME SCRIPT ARGS`, after the interpreter); None for a built-in model
        (the worker, runtime/worker.py)."""
        if not job.script:
            return None
        return ["-m", "xover.runtime.script_shim", ENGINES[self.engine].runtime_name, *job.script]


class HorovodRanks(EngineRanks):
    """horovodrun."""

    engine = HOROVOD

    def check_job(self, job: JobSpec) -> None:
        """What horovodrun 0.28.1 would start wrongly: a rank's shell line (`sh -c 'env K=V ... python ...'`,
        its arguments and forwarded variables quoted) longer than Linux takes in one argument (it failed to
        start, "Argument list too long", the job's summary saying only "exited with code 1"); and ranks on
        another host started from a folder whose path a shell would read as more than that path (horovodrun
        starts them with `cd FOLDER ; ...` through ssh, the folder unquoted: the remote shell ran a `$(...)`
        in it, and a space made the `cd` fail unseen, the ranks running in the home folder)."""
        line = sum(len(os.fsencode(shlex.quote(word))) + 1 for word in job.script or []) + sum(
            len(os.fsencode(f"{name}={shlex.quote(value)}")) + 1
            for name, value in horovodrun_env(os.environ, SECRET_VARIABLES).items()
        )
        if line > MAX_SHELL_LINE - SHELL_LINE_MARGIN:
            raise XoverError(
                f"job '{job.name}': horovodrun starts each rank with one shell line, which Linux takes up to "
                f"{MAX_SHELL_LINE // 1024} KiB long, and its script's arguments and the variables horovodrun "
                f"forwards make {line // 1024} KiB of it: pass long values in a file the script reads"
            )
        folder = os.getcwd()
        remote = sorted(host for host in job.devices if not is_local(host))
        if remote and shlex.quote(folder) != folder:
            raise XoverError(
                f"job '{job.name}' runs Horovod ranks on {', '.join(remote)}, which horovodrun starts in this folder "
                f"there without quoting its path, and {folder!r} holds characters a shell reads (spaces, quotes, "
                "$, ...): run xover from a folder whose path has only letters, digits and @%+=:,./-_"
            )

    def launch_commands(
        self,
        job: JobSpec,
        log_dir: Path,
        spec_path: Path,
        env: dict[str, str],
        prefix: list[str],
        deadline: float | None = None,
    ) -> list[list[str]]:
        """One horovodrun for every host, over the emulated hosts' interfaces where there are some; the
        metric token and the job file's variables reach the ranks through a private file on each host."""
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
                    interfaces=host_interfaces(),
                    private=private_variables(env, job.recipe.variable_names),
                    remote_prefix=prefix,
                    deadline=deadline,
                ),
            ]
        ]

    def launch_env(self, job: JobSpec, env: dict[str, str]) -> dict[str, str]:
        """horovodrun copies all of its environment onto its ranks' command lines: an allow-list, without
        the store's URL, the metric token or the job file's variables (run/external/horovodrun.py)."""
        return horovodrun_env(env, (*SECRET_VARIABLES, *job.recipe.variable_names))


class TorchRanks(EngineRanks):
    """torchrun."""

    engine = TORCH

    def check_jobs(self, device_kind: str) -> None:
        """XOVER_TORCH_BACKEND, checked before any torch job starts (the workers would each fail on it)."""
        torch_backend(device_kind == "gpu")

    def check_job(self, job: JobSpec) -> None:
        """A node on another host starts through ssh with one shell line there (`cd FOLDER && python ...
        torchrun ... SCRIPT ARGS`, each word quoted), which Linux takes up to MAX_SHELL_LINE long: longer
        arguments are refused before anything starts (that host's shell failed with "Argument list too long")."""
        if all(is_local(host) for host in job.devices):
            _check_local_arguments(job)  # torchrun here: an argument list, each word its own
            return
        line = len(os.fsencode(shlex.quote(os.getcwd()))) + sum(
            len(os.fsencode(shlex.quote(word))) + 1 for word in job.script or []
        )
        if line > MAX_SHELL_LINE - SHELL_LINE_MARGIN:
            raise XoverError(
                f"job '{job.name}': torchrun's nodes on other hosts start through ssh with one shell line, which "
                f"Linux takes up to {MAX_SHELL_LINE // 1024} KiB long, and its script's arguments make "
                f"{line // 1024} KiB of it: pass long values in a file the script reads"
            )

    def crossover_warning(self) -> str | None:
        """On GPUs over NCCL: an NCCL all-reduce waiting for its peer is a kernel that spins on the GPU,
        and the partner's turn is time-sliced with it (docs/gpu.md, docs/measurements.md)."""
        if local_device_count()[0] != "gpu" or torch_backend(on_gpu=True) != "nccl":
            return None
        return (
            "crossover on GPUs over NCCL: a waiting NCCL all-reduce spins on the GPU and slows the partner's "
            "turn (time-slicing); XOVER_TORCH_BACKEND=gloo all-reduces through host memory and leaves the GPU "
            "to the partner (docs/gpu.md)"
        )

    def launch_commands(
        self,
        job: JobSpec,
        log_dir: Path,
        spec_path: Path,
        env: dict[str, str],
        prefix: list[str],
        deadline: float | None = None,
    ) -> list[list[str]]:
        """torchrun, one per node (over ssh for other hosts)."""
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


def _check_local_arguments(job: JobSpec) -> None:
    """torchrun started here takes the script's arguments and the job file's variables as they are, which Linux
    takes up to MAX_SHELL_LINE long each and up to ARG_MAX together, this environment's included (the launch
    failed with "Argument list too long")."""
    script = job.script or []
    words = [(len(os.fsencode(word)) + 1, f"the script's argument {index}") for index, word in enumerate(script[1:], 1)]
    words += [
        (len(os.fsencode(f"{name}={value}")) + 1, f"the job file's variable {name}")
        for name, value in job.recipe.env.items()
    ]
    size, what = max(words, default=(0, ""))
    if size >= MAX_SHELL_LINE - SHELL_LINE_MARGIN:
        raise XoverError(
            f"job '{job.name}': Linux takes a program's argument or variable up to {MAX_SHELL_LINE // 1024} KiB "
            f"long, and {what} is {size // 1024} KiB: pass long values in a file the script reads"
        )
    environment = sum(len(os.fsencode(name)) + len(os.fsencode(value)) + 2 for name, value in os.environ.items())
    together = (
        sum(size for size, _ in words)
        + len(os.fsencode(script[0] if script else ""))
        + environment
        + 8 * (len(words) + len(os.environ))
    )  # and a pointer each
    if together >= os.sysconf("SC_ARG_MAX") - 4 * SHELL_LINE_MARGIN:
        raise XoverError(
            f"job '{job.name}': Linux takes a program's arguments and variables up to "
            f"{os.sysconf('SC_ARG_MAX') // 1024} KiB together, and the script's arguments, the job file's variables "
            f"and this environment make {together // 1024} KiB: pass long values in a file the script reads"
        )


ENGINE_RANKS: dict[str, EngineRanks] = {}


def register_ranks(ranks: EngineRanks) -> EngineRanks:
    """Start the ranks of the engine `ranks.engine` names this way."""
    ENGINE_RANKS[ranks.engine] = ranks
    return ranks


register_ranks(HorovodRanks())
register_ranks(TorchRanks())


def check_devices(jobs: list[JobSpec], planned: bool = False) -> None:
    """Fail before anything starts when a job asks for devices this machine does not have (`planned`: the
    placement is a plan's, which --np and -H do not change)."""
    kind, available = local_device_count()
    for engine in {job.engine for job in jobs}:
        ranks_of(engine).check_jobs(kind)  # e.g. torch: XOVER_TORCH_BACKEND, before any torch job starts
    for job in jobs:
        ranks_of(job.engine).check_job(job)  # e.g. horovod: a folder its remote ranks' shell would misread
        for host, indices in job.devices.items():
            if not is_local(host):
                continue  # remote hosts are counted by their -H slots
            if len(indices) > available or max(indices, default=0) >= available:
                remedy = (
                    f"plan again for it (xover plan ... --devices {available}) or across hosts (-H)"
                    if planned
                    else "lower np (--np) or add hosts with -H"
                )
                # a job wider than the machine is said as such (placed on device 998 said nothing of --np 999)
                where = (
                    f"needs {len(indices)} devices of this machine"
                    if len(indices) > available
                    else f"is placed on device {max(indices)} of this machine"
                )
                raise XoverError(f"job '{job.name}' {where}, which has {available} {kind.upper()} devices; {remedy}")


def crossover_warning(jobs: list[JobSpec], modes: list[str]) -> str | None:
    """A warning where the jobs' engines would take crossover turns badly on this machine (torch's:
    on GPUs over NCCL, `engines.Torch.crossover_warning`), or None."""
    if not any(turn_taking(mode) for mode in modes):
        return None
    engines = sorted({job.engine for job in jobs})
    return next(filter(None, (ranks_of(engine).crossover_warning() for engine in engines)), None)


def ranks_of(engine: str) -> EngineRanks:
    """How the ranks of that engine are started; an engine registered without them is one line saying so."""
    if engine not in ENGINE_RANKS:
        raise XoverError(f"engine {engine}: nothing starts its ranks (register its EngineRanks, run/ranks.py)")
    return ENGINE_RANKS[engine]
