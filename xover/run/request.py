"""What a run is asked to do, typed once: `RunOptions` (the command line's choices, resolved), the
`LaunchRequest` a launcher is handed, the `LaunchResult` it returns, and the `GroupRequest` a group's own
job reads where a scheduler runs it on other machines (serialised: the node reads it, not a command line)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import DEFAULT_ENGINE
from ..links import Link
from ..plan import Plan
from ..sharing import modes_of
from ..turns.policies import DEFAULT_POLICY
from .experiment import Experiment, experiment
from .sinks import MetricSink, default_sinks

if TYPE_CHECKING:
    from ..store.session import Store
    from .exporter import PrometheusSink
    from .jobs import GroupToRun
    from .schedule import Unit

DEFAULT_LAUNCHER = "local"


@dataclass(frozen=True)
class RunOptions:
    """How `xover run` runs its groups: the command line's choices, each as its option says
    (docs/reference.md, `xover run`). A launcher gets them resolved, in its LaunchRequest; a group's own
    job gets them in its GroupRequest (`to_dict` / `from_dict`: all but the plan itself, read again from
    `plan_path`)."""

    modes: tuple[str, ...] = field(default_factory=lambda: tuple(modes_of(None, plan=False)))
    policies: tuple[str, ...] = (DEFAULT_POLICY,)
    engine: str = DEFAULT_ENGINE
    link: Link | None = None  # --bandwidth (a shaped loopback, or the host network); None: the jobs' own
    iterations: int | None = None
    seconds: float | None = None
    timeout_s: float | None = None
    wait: bool = False  # for devices another xover holds
    mps: bool = False  # every unit under a CUDA MPS daemon of the run's own (run/mps.py)
    allow_changed: bool = False  # run a plan's scripts changed since profiled, its recipes edited since planned
    launcher: str = DEFAULT_LAUNCHER
    launcher_options: dict[str, str | None] = field(default_factory=dict)  # its own (--partition, ...)
    plan: Plan | None = None  # the plan the groups come from, recorded with the run
    plan_path: str | None = None
    kind: str = "run"  # the experiment's kind in the store
    command: str = "xover run"  # the command line, as recorded
    show_progress: bool = True
    metrics_port: int | None = None  # serve the run's figures to Prometheus here (None: XOVER_METRICS_PORT, else off)

    def to_dict(self) -> dict[str, Any]:
        """Every choice but the plan object (its file is `plan_path`), as JSON takes it (the link by its key)."""
        values = {spec.name: getattr(self, spec.name) for spec in fields(self) if spec.name != "plan"}
        return {**values, "link": self.link.key if self.link is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunOptions:
        """The options `to_dict` wrote (tuples from lists)."""
        known = {spec.name for spec in fields(cls)} - {"plan"}
        values = {key: value for key, value in data.items() if key in known}
        for key in ("modes", "policies"):
            if key in values:
                values[key] = tuple(values[key])
        if values.get("link") is not None:
            values["link"] = Link.of_key(values["link"])
        return cls(**values)


@dataclass(frozen=True)
class LaunchRequest:
    """What `run_groups` hands a launcher, one object: the groups, the units they run as, how they run
    (the command line's choices, resolved: the modes and policies to run, the link's rate, MPS; and the
    launcher's own options, `options.launcher_options`) and how the experiment is recorded."""

    store: Store
    groups: list[GroupToRun]
    units: list[Unit]  # in order (units.py)
    options: RunOptions
    link: Link  # the run's link, as the experiment records it
    comparison: bool = False  # the units one at a time (a comparison), or a plan's real schedule
    plan_id: int | None = None  # the plan recorded with the run
    exporter: PrometheusSink | None = None  # --metrics-port: the Prometheus exporter (exporter.py), serving already

    def option(self, name: str) -> str | None:
        """The value of one of the launcher's own options (LauncherOption.name), None if not given."""
        return self.options.launcher_options.get(name)

    def sinks(self) -> list[str | MetricSink]:
        """The experiment's live sinks: progress bars where shown, and the exporter where asked for."""
        return [*default_sinks(self.options.show_progress), *([self.exporter] if self.exporter is not None else [])]

    def experiment(
        self, sinks: Sequence[str | MetricSink] | None = None
    ) -> contextlib.AbstractContextManager[Experiment]:
        """The recorded experiment the units run in (experiment.py), with the metric sinks the request
        says (or `sinks`)."""
        options = self.options
        return experiment(
            self.store,
            options.kind,
            options.command,
            self.link,
            self.sinks() if sinks is None else sinks,
            self.plan_id,
            options.timeout_s,
        )


@dataclass(frozen=True)
class LaunchResult:
    """What a launcher's `launch` returns: the experiment its units ran in, and each group's job id of the
    launcher's own scheduler (a Slurm job's id; none for a launcher that runs the units itself)."""

    experiment: Experiment
    launcher_jobs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupRequest:
    """One group of a plan, run inside a job of a launcher's scheduler on other machines: the experiment it
    records into, the group's index in the plan, and the run's options. Written as JSON next to the job's
    script by the submitting xover; the group's job reads it (`xover.run.group_job`), so the same code runs
    the group there as here."""

    experiment: str
    group: int
    launcher: str
    options: RunOptions

    def write(self, path: Path) -> Path:
        """Write it as JSON at `path` (readable by its owner only: the options name the plan's path)."""
        path.write_text(json.dumps({**asdict(self), "options": self.options.to_dict()}, indent=1))
        path.chmod(0o600)
        return path

    @classmethod
    def read(cls, path: str | Path) -> GroupRequest:
        """The request `write` wrote."""
        data = json.loads(Path(path).read_text())
        return cls(data["experiment"], int(data["group"]), data["launcher"], RunOptions.from_dict(data["options"]))
