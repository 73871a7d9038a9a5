"""Launchers: how a run's groups reach their devices, each one object in one registry.

    local   this process runs the units itself: each job's engine starts its ranks (horovodrun or
            torchrun, run/ranks.py), on this machine or on -H hosts over ssh (run/local.py)
    slurm   each group of a plan is one Slurm job, submitted, followed and recorded (run/on_slurm.py)

A `Launcher` declares the options of `xover run` that only it takes (`options`: the command line
offers each, and refuses it under another launcher), checks what it is asked (`check`: inputs it
cannot run, one line, before anything is recorded) and runs the units of an experiment (`launch`),
building its own command lines. Both read one typed `LaunchRequest` (request.py). A launcher is a class
in a module of its own that registers itself when loaded (`register_launcher(...)`); the built-in ones
are loaded with the run's library (commands.py), another one by `xover.plugins` (docs/extending.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..console import print_notice
from ..errors import XoverError, printable
from ..plugins import PluginRegistry
from .request import DEFAULT_LAUNCHER, LaunchRequest, LaunchResult

__all__ = ["DEFAULT_LAUNCHER", "LAUNCHERS", "LaunchRequest", "LaunchResult", "Launcher", "LauncherOption"]


@dataclass(frozen=True)
class LauncherOption:
    """An option of `xover run` that only some launchers take: `--NAME VALUE`, a string (None: not given)."""

    name: str  # its Python name: time_limit is --time-limit
    help: str  # what it is, for --help (which adds the launchers that take it)

    @property
    def flag(self) -> str:
        """The option on the command line: time_limit is --time-limit."""
        return "--" + self.name.replace("_", "-")


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

    def doctor_check(self) -> tuple[str, bool, str, str] | None:
        """What `xover doctor` says of this launcher here: (name, ok, detail, how to fix it); None: nothing.
        A launcher's check is never required: jobs run here without it."""
        return None

    def allocated_hosts(self) -> tuple[str, str] | None:
        """Where this process runs inside an allocation of this launcher's scheduler (a Slurm job): its
        hosts as a -H value, and one line describing them; None elsewhere."""
        return None

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Run the request's units inside one recorded experiment: the experiment, and group -> a job id
        of the launcher's own scheduler, for launchers that have one."""
        raise NotImplementedError


LAUNCHERS: PluginRegistry[Launcher] = PluginRegistry()  # local and slurm come as plugins of xover's own


def register_launcher(launcher: Launcher) -> Launcher:
    """Offer a launcher to `xover run --launcher NAME`, with its options (when the command line is built)."""
    LAUNCHERS[launcher.name] = launcher
    ordered = sorted(dict.items(LAUNCHERS), key=lambda item: item[0] != DEFAULT_LAUNCHER)  # the default first
    dict.clear(LAUNCHERS)
    dict.update(LAUNCHERS, ordered)
    return launcher


def launcher_named(name: str) -> Launcher:
    """The registered launcher of that name; another name is one line listing those there are."""
    if name not in LAUNCHERS:
        raise XoverError(f"--launcher {printable(name)}: choose {' or '.join(LAUNCHERS)}")
    return LAUNCHERS[name]


def hosts_or_allocation(hosts: str | None) -> str | None:
    """-H as given; without it, inside an allocation of a launcher's scheduler (a Slurm job), the
    allocation's nodes and devices (said on stderr)."""
    if hosts:
        return hosts
    for launcher in LAUNCHERS.values():
        found = launcher.allocated_hosts()
        if found is not None:
            print_notice(found[1])
            return str(found[0])
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
