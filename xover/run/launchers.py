"""Launchers: how a run's groups reach their devices.

    local   this process runs the units itself: horovodrun or torchrun, on this machine or on -H hosts
            over ssh (schedule.py)
    slurm   each group of a plan is one Slurm job, submitted, followed and recorded (slurm.py)

A launcher checks what it is asked (`check`: options it does not take, inputs it cannot run, one
line each) and runs the units of an experiment (`launch`). A new launcher is one class with these
two methods and a line in LAUNCHERS; `xover run --launcher` offers what LAUNCHERS holds. The rooms a
launcher runs with are imported when it launches: the CLI reads LAUNCHERS for its help, at every start.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import XoverError

if TYPE_CHECKING:
    from ..store.session import Store
    from .jobs import GroupToRun
    from .schedule import Unit
    from .sinks import MetricSink


@dataclass
class LaunchRequest:
    """What `run_groups` hands a launcher: the groups, their units and how the experiment is recorded."""
    store: Store
    groups: list[GroupToRun]
    units: list[Unit]
    comparison: bool  # the units one at a time (a comparison), or a plan's real schedule
    modes: list[str]
    policies: list[str]
    engine: str
    kind: str
    command: str
    link: str
    bandwidth: str | None = None
    iterations: int | None = None
    seconds: float | None = None
    show_progress: bool = True
    plan_id: int | None = None
    plan_path: str | None = None
    timeout_s: float | None = None
    wait: bool = False
    mps: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # the launcher's own (LaunchRequest.option_names)
    exporter: MetricSink | None = None  # --metrics-port: the Prometheus exporter (exporter.py), serving already

    def sinks(self, show_progress: bool) -> list[str | MetricSink]:
        """The experiment's live sinks: progress bars where shown, and the exporter where asked for."""
        from .sinks import default_sinks

        return [*default_sinks(show_progress), *([self.exporter] if self.exporter is not None else [])]


class Launcher(Protocol):
    name: str
    summary: str  # one line for --help
    option_names: tuple[str, ...]  # the command-line options that only this launcher takes

    def check(self, request: LaunchRequest) -> None:
        """Refuse, with one line, what this launcher cannot run (before anything is recorded)."""

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        """Run the request's units inside one recorded experiment: (the experiment, group -> a job id
        of the launcher's own, for launchers that have them)."""


class LocalLauncher:
    name = "local"
    summary = "this machine, or -H hosts over ssh"
    option_names: tuple[str, ...] = ()

    def check(self, request: LaunchRequest) -> None:
        pass

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        from .experiment import experiment, lease_devices
        from .mps import MpsDaemon
        from .schedule import Scheduler

        with experiment(request.store, request.kind, request.command, request.bandwidth, request.sinks(request.show_progress),
                        request.plan_id, request.timeout_s, link=request.link) as run:
            lease_devices(run, [job for group in request.groups for job in group.jobs], request.wait)
            with MpsDaemon(run.results_dir, run.id) if request.mps else contextlib.nullcontext():
                Scheduler(run.context).run(request.units, exclusive=request.comparison)
        return run, {}


class SlurmLauncher:
    name = "slurm"
    summary = "each group of the plan submitted as one Slurm job; the store must be one every node reaches"
    option_names = ("partition", "account", "time_limit")  # and allow_changed, which every launcher is given

    def check(self, request: LaunchRequest) -> None:
        if not request.plan_path or request.bandwidth or request.mps:
            raise XoverError("--launcher slurm runs a plan file (each group one Slurm job), without --bandwidth "
                             "or --mps")

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        from ..console import errors
        from . import slurm as on_slurm
        from .experiment import experiment

        submitted: dict[int, str] = {}
        with experiment(request.store, request.kind, request.command, request.bandwidth, (), request.plan_id,
                        request.timeout_s, link=request.link) as run:
            on_slurm.submit_and_follow(run, request.groups, request.plan_path, request.modes, request.policies,
                                       request.engine, request.iterations, request.seconds, request.store.url,
                                       submitted, errors, request.timeout_s, **request.options)
        return run, submitted


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in (LocalLauncher(), SlurmLauncher())}


def launcher_named(name: str) -> Launcher:
    if name not in LAUNCHERS:
        raise XoverError(f"--launcher {name}: choose {' or '.join(LAUNCHERS)}")
    return LAUNCHERS[name]


def check_launcher_options(name: str, given: dict[str, Any]) -> None:
    """Options given on the command line that the chosen launcher does not take: one line naming them."""
    launcher = launcher_named(name)
    stray = [key for key, value in given.items() if value is not None and key not in launcher.option_names]
    if stray:
        owners = {key: [other.name for other in LAUNCHERS.values() if key in other.option_names] for key in stray}
        flags = ", ".join("--" + key.replace("_", "-") for key in stray)
        takers = sorted({owner for names in owners.values() for owner in names})
        raise XoverError(f"{flags}: for --launcher {' or '.join(takers) or '(none)'}")


def launchers_help() -> str:
    return "; ".join(f"{launcher.name}: {launcher.summary}" for launcher in LAUNCHERS.values())
