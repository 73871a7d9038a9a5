"""Metric sinks: where a run's records go as they arrive.

Every record a run's workers write (runtime/metrics.py: one dataclass per kind) reaches the scheduler,
which hands each batch to the experiment's sinks in order: the store first (the record of truth, one
transaction per batch), then whatever else watches the run - the live progress display, and the place
where a live exporter or a tracking store plugs in. A sink is one class with the methods below
(torch-elastic's MetricHandler is the model), registered by name in SINKS; which sinks a run has is
configuration (`sinks_named`: a command's own choice, e.g. the progress display unless its output is
JSON, and the names in XOVER_METRIC_SINKS), not a flag per sink in the scheduler. docs/extending.md
shows a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..console import ProgressBars, print_notice
from ..errors import XoverError
from ..records import IterationRecord, MetricRecord, StartRecord
from ..streams import OutputFailed

if TYPE_CHECKING:
    from ..turns.service import TurnServerEndpoint
    from .record import Recorder


@dataclass(frozen=True)
class JobLabels:
    """Whose records these are: one job's run in one mode (what a sink labels its figures with)."""

    run_id: int
    experiment_id: str
    job: str
    mode: str
    group: int | None
    policy: str | None  # crossover: the turn policy
    hosts: str  # the job's -H spec

    @property
    def label(self) -> str:
        """How the run is shown: job [mode/policy]."""
        return f"{self.job} [{self.mode}{'/' + self.policy if self.policy else ''}]"


@dataclass(frozen=True)
class GroupLabels:
    """Whose way of sharing this is: a group's unit in one mode (an adaptive group's segments)."""

    experiment_id: str
    group: int | None
    jobs: tuple[str, ...]
    mode: str


Received = tuple[JobLabels, MetricRecord]


class MetricSink:
    """One consumer of an experiment's records. Every method does nothing unless a sink overrides it."""

    name = ""
    essential = False  # a failure of this sink fails the run (the store's); any other sink's is dropped
    wants_turn_servers = False  # crossover's turn servers serve their devices' figures, and `turn_servers` says where

    def opened(self, experiment_id: str) -> None:
        """The experiment starts (its row is stored)."""

    def received(self, batch: Sequence[Received]) -> None:
        """Records of the run's jobs, in the order they were written (the store has them already)."""

    def job_ended(self, job: JobLabels, status: str) -> None:
        """A job's run ended: finished, failed, stopped, timeout, interrupted..."""

    def closed(self, status: str) -> None:
        """The experiment ended (whatever ended it); a sink lets go of what it holds."""

    def turn_servers(self, unit: str, endpoints: Sequence[TurnServerEndpoint]) -> None:
        """Where the turn servers of a crossover run (`unit`) serve their devices' figures, one per host;
        empty once they stopped. Only for a sink that `wants_turn_servers`."""

    def adaptive_segment(self, group: GroupLabels, segment: Mapping[str, Any]) -> None:
        """An adaptive group's segment opened, was decided or closed (run/adaptive.py's `Segment.to_json()`: its
        kind, its way, why, what it measured, the figures a decision was made on); the open one is the group's
        way now."""


class StoreSink(MetricSink):
    """The store: every record, one transaction per batch. Always a run's first sink."""

    name = "store"
    essential = True

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def received(self, batch: Sequence[Received]) -> None:
        """Store the batch, one transaction."""
        self.recorder.apply([(job.run_id, record) for job, record in batch])


class ProgressSink(MetricSink):
    """A live bar per job on stderr: iterations done, last loss, status."""

    name = "progress"

    def __init__(self) -> None:
        self.bars = ProgressBars()

    def opened(self, experiment_id: str) -> None:
        """Start drawing."""
        self.bars.start()

    def received(self, batch: Sequence[Received]) -> None:
        """A bar for each job that starts; each iteration moves its bar and shows its loss."""
        for job, record in batch:
            if isinstance(record, StartRecord):
                self.bars.job_started(job.run_id, job.label, record.iterations)
            elif isinstance(record, IterationRecord):
                self.bars.job_progress(job.run_id, record.step + 1, record.loss)

    def job_ended(self, job: JobLabels, status: str) -> None:
        """The job's bar says how it ended."""
        self.bars.job_finished(job.run_id, status, job.label)

    def closed(self, status: str) -> None:
        """Stop drawing (the bars stay on the screen)."""
        self.bars.stop()


def deliver(sinks: Sequence[MetricSink], call: Callable[[MetricSink], None]) -> list[MetricSink]:
    """`call` each sink in order; the sinks still there after it. A sink that fails is said once and
    left out from then on: a live display or exporter going wrong never stops the training it watches."""
    kept = []
    for sink in sinks:
        try:
            call(sink)
        except (Exception, OutputFailed) as error:  # a display on a stdout that went away too
            if sink.essential:
                raise
            print_notice(f"xover: the {sink.name} metric sink failed and is left out for the rest of the run: {error}")
            continue
        kept.append(sink)
    return kept


# name -> how to make it; a new sink is a class (above, or anywhere) and a line here or `register_sink`
SINKS: dict[str, Callable[[], MetricSink]] = {"progress": ProgressSink}


def register_sink(sink: type[MetricSink]) -> None:
    """Offer a sink by its name: a run adds it when asked (`XOVER_METRIC_SINKS`, or a command's option)."""
    SINKS[sink.name] = sink


def sinks_named(names: Sequence[str | MetricSink]) -> list[MetricSink]:
    """The live sinks a run was configured with (the store is added by the experiment itself): by name,
    or made already where a sink needs the run's own settings (the Prometheus exporter's port)."""
    unknown = [name for name in names if isinstance(name, str) and name not in SINKS]
    if unknown:
        raise XoverError(f"no metric sink named {', '.join(unknown)} (there are: {', '.join(sorted(SINKS))})")
    return [SINKS[name]() if isinstance(name, str) else name for name in names]


def default_sinks(show_progress: bool) -> tuple[str, ...]:
    """What a command shows while it runs: progress bars, unless its output is JSON."""
    return ("progress",) if show_progress else ()
