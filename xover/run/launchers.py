"""Launchers: how a run's groups reach their devices, each one object in one registry.

    local   this process runs the units itself: each job's engine starts its ranks (horovodrun or
            torchrun, xover/engines.py), on this machine or on -H hosts over ssh (schedule.py)
    slurm   each group of a plan is one Slurm job, submitted, followed and recorded (on_slurm.py)

A `Launcher` declares the options of `xover run` that only it takes (`options`: the command line
offers each, and refuses it under another launcher), checks what it is asked (`check`: inputs it
cannot run, one line, before anything is recorded) and runs the units of an experiment (`launch`),
building its own command lines. Both read one typed `LaunchRequest`. A new launcher is a class and
`register_launcher(...)` (docs/extending.md); `xover run --launcher` offers what LAUNCHERS holds when
the command line is built. The rooms a launcher runs with are imported when it launches: the CLI reads
LAUNCHERS for its help, at every start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import XoverError

if TYPE_CHECKING:
    from ..store.session import Store
    from .commands import RunOptions
    from .exporter import PrometheusSink
    from .jobs import GroupToRun
    from .schedule import Unit
    from .sinks import MetricSink

DEFAULT_LAUNCHER = "local"


@dataclass(frozen=True)
class LauncherOption:
    """An option of `xover run` that only some launchers take: `--NAME VALUE`, a string (None: not given)."""

    name: str  # its Python name: time_limit is --time-limit
    help: str  # what it is, for --help (which adds the launchers that take it)

    @property
    def flag(self) -> str:
        """The option on the command line: time_limit is --time-limit."""
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class LaunchRequest:
    """What `run_groups` hands a launcher, one object: the groups, the units they run as, how they run
    (the command line's choices, resolved: the modes and policies to run, the link's rate, MPS; and the
    launcher's own options, `options.launcher_options`) and how the experiment is recorded."""

    store: Store
    groups: list[GroupToRun]
    units: list[Unit]  # in order (units.py)
    options: RunOptions
    link: str  # what the experiment records as its link: a rate, or 'host'
    comparison: bool = False  # the units one at a time (a comparison), or a plan's real schedule
    plan_id: int | None = None  # the plan recorded with the run
    exporter: PrometheusSink | None = None  # --metrics-port: the Prometheus exporter (exporter.py), serving already

    def option(self, name: str) -> str | None:
        """The value of one of the launcher's own options (LauncherOption.name), None if not given."""
        return self.options.launcher_options.get(name)

    def sinks(self) -> list[str | MetricSink]:
        """The experiment's live sinks: progress bars where shown, and the exporter where asked for."""
        from .sinks import default_sinks

        return [*default_sinks(self.options.show_progress), *([self.exporter] if self.exporter is not None else [])]

    def experiment(self, sinks: Sequence[str | MetricSink] | None = None):
        """The recorded experiment the units run in (experiment.py), with the metric sinks the request
        says (or `sinks`)."""
        from .experiment import experiment

        options = self.options
        return experiment(
            self.store,
            options.kind,
            options.command,
            options.bandwidth,
            self.sinks() if sinks is None else sinks,
            self.plan_id,
            options.timeout_s,
            link=self.link,
        )


class Launcher:
    """One launcher. A subclass sets its name, summary and options, and implements `launch`."""

    name = ""
    summary = ""  # one line for --help
    options: tuple[LauncherOption, ...] = ()  # the options of `xover run` that only this launcher takes
    # Its jobs start from this process (on this machine, or on -H hosts over ssh): a plan's shaped link
    # and this machine's warnings apply to them. A launcher that hands its groups to another machine's
    # scheduler (Slurm) sets False.
    runs_here = True

    @property
    def option_names(self) -> tuple[str, ...]:
        """The Python names of the options only this launcher takes."""
        return tuple(option.name for option in self.options)

    def check(self, request: LaunchRequest) -> None:
        """Refuse, with one line, what this launcher cannot run (before anything is recorded)."""

    def allocated_hosts(self) -> tuple[str, str] | None:
        """Where this process runs inside an allocation of this launcher's scheduler (a Slurm job): its
        hosts as a -H value, and one line describing them; None elsewhere."""
        return None

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        """Run the request's units inside one recorded experiment: (the experiment, group -> a job id
        of the launcher's own, for launchers that have them)."""
        raise NotImplementedError


class LocalLauncher(Launcher):
    """The units run from this process, on this machine or on -H hosts over ssh."""

    name = "local"
    summary = "this machine, or -H hosts over ssh"

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        """Lease the jobs' devices, start an MPS daemon if asked, and run the units in order here."""
        from .experiment import lease_devices
        from .mps import MpsDaemon
        from .schedule import Scheduler

        with request.experiment() as current:
            lease_devices(current, [job for group in request.groups for job in group.jobs], request.options.wait)
            with MpsDaemon(current.results_dir, current.id) if request.options.mps else contextlib.nullcontext():
                Scheduler(current.context).run(request.units, exclusive=request.comparison)
        return current, {}


class SlurmLauncher(Launcher):
    """Each group of a plan submitted as one Slurm job, followed until it ends and recorded."""

    name = "slurm"
    summary = "each group of the plan submitted as one Slurm job; the store must be one every node reaches"
    options = (
        LauncherOption("partition", "Slurm partition"),
        LauncherOption("account", "Slurm account"),
        LauncherOption("time_limit", "Slurm time limit per group, e.g. 1:00:00"),
    )
    runs_here = False

    def check(self, request: LaunchRequest) -> None:
        """Refuse all but a plan file, and --bandwidth or --mps, which cannot reach another machine's jobs."""
        if not request.options.plan_path or request.options.bandwidth or request.options.mps:
            raise XoverError(
                f"--launcher {self.name} runs a plan file (each group one Slurm job), without --bandwidth or --mps"
            )

    def allocated_hosts(self) -> tuple[str, str] | None:
        """Inside a Slurm job (salloc, sbatch, srun): the allocation's nodes and devices."""
        from .external import slurm

        if not slurm.in_allocation():
            return None
        allocation = slurm.allocation()
        return allocation.hosts_option(), f"hosts from the {allocation.describe()}"

    def launch(self, request: LaunchRequest) -> tuple[Any, dict[int, str]]:
        """Submit each group's batch script and follow the jobs; returns group -> its Slurm job id."""
        from ..console import errors
        from . import on_slurm

        submitted: dict[int, str] = {}
        with request.experiment(sinks=()) as current:
            on_slurm.submit_and_follow(current, request, submitted, errors)  # builds each group's batch script
        return current, submitted


LAUNCHERS: dict[str, Launcher] = {}


def register_launcher(launcher: Launcher) -> Launcher:
    """Offer a launcher to `xover run --launcher NAME`, with its options (when the command line is built)."""
    LAUNCHERS[launcher.name] = launcher
    return launcher


register_launcher(LocalLauncher())
register_launcher(SlurmLauncher())


def launcher_named(name: str) -> Launcher:
    """The registered launcher of that name; another name is one line listing those there are."""
    if name not in LAUNCHERS:
        raise XoverError(f"--launcher {name}: choose {' or '.join(LAUNCHERS)}")
    return LAUNCHERS[name]


def hosts_or_allocation(hosts: str | None) -> str | None:
    """-H as given; without it, inside an allocation of a launcher's scheduler (a Slurm job), the
    allocation's nodes and devices (said on stderr)."""
    if hosts:
        return hosts
    for launcher in LAUNCHERS.values():
        found = launcher.allocated_hosts()
        if found is not None:
            from ..console import errors

            errors.print(found[1], highlight=False, soft_wrap=True, markup=False)
            return found[0]
    return None


def launcher_options() -> dict[str, tuple[LauncherOption, list[str]]]:
    """Every launcher's own options, once each: name -> (the option, the launchers that take it)."""
    found: dict[str, tuple[LauncherOption, list[str]]] = {}
    for launcher in LAUNCHERS.values():
        for option in launcher.options:
            found.setdefault(option.name, (option, []))[1].append(launcher.name)
    return found


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
    """Every launcher and its summary, for `xover run --help`."""
    return "; ".join(f"{launcher.name}: {launcher.summary}" for launcher in LAUNCHERS.values())
