"""The Prometheus exporter: a run's figures served live in Prometheus' text format (`xover run
--metrics-port PORT`, or XOVER_METRICS_PORT).

A metric sink (sinks.py) with a registry of its own (prometheus_client's CollectorRegistry) and
prometheus_client's HTTP server on PORT for the whole run. Everything it serves comes from the run's
metric records as they arrive (runtime/metrics.py) and from what the run knows before it starts (the
plan's picks and predictions, the jobs' profiles):

    per job     labels experiment, group, job, mode, policy, host (the job's -H hosts)
    per device  labels experiment, host, device: the device each job's rank 0 runs on, whose turns the
                records carry (`held`: the spans rank 0 held its device's turn)
    per group   labels experiment, group: the plan's way of sharing and its predicted gain

Which job holds a device, and the handoffs between jobs, are settled from the jobs' `held` spans in
time order: a span is counted once every job still running on the device has reported past its start
(records of different jobs arrive in any order), so the figures trail the run by about an iteration.
The list of metrics, with their meaning, is in docs/reference.md; docs/grafana/xover.json charts them.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ..errors import XoverError
from ..runtime.metrics import EndRecord, IterationRecord, StartRecord, TurnsLostRecord
from .sinks import JobLabels, MetricSink, Received

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

JOB_LABELS = ("experiment", "group", "job", "mode", "policy", "host")
DEVICE_LABELS = ("experiment", "host", "device")
GROUP_LABELS = ("experiment", "group")
ITERATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
RECENT_ITERATIONS = 20  # the window of a job's samples per second and slowdown
ADDRESS = "0.0.0.0"  # every interface: a Prometheus server elsewhere scrapes it


@dataclass(frozen=True)
class JobFacts:
    """What the run knows of a job before it starts."""

    device: tuple[str, int]  # rank 0's (host, device index)
    solo_iteration_s: float | None = None  # its iteration alone, from its profile


@dataclass(frozen=True)
class GroupFacts:
    """A plan's pick for a group: its way of sharing and the gain it predicted (None without a plan)."""

    index: int
    sharing: str | None = None
    predicted_gain: float | None = None


@dataclass(frozen=True)
class RunFacts:
    """What the run knows before it starts: each job's speed alone, each group's planned sharing and gain."""

    jobs: dict[str, JobFacts] = field(default_factory=dict)  # by job name
    groups: tuple[GroupFacts, ...] = ()


def check_port(port: int, where: str = "--metrics-port") -> int:
    """A port Prometheus can scrape (1 to 65535); `where` names the option or setting it came from."""
    if not 1 <= port <= 65535:
        raise XoverError(f"{where} {port}: give a TCP port from 1 to 65535")
    return port


class Metrics:
    """The exporter's metrics, in a registry of their own (what the HTTP server serves)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def job(kind, name, text, **options):
            return kind(name, text, JOB_LABELS, registry=registry, **options)

        self.iterations = job(Counter, "xover_job_iterations_total", "Training iterations done (optimizer steps).")
        self.samples = job(Counter, "xover_job_samples_total", "Training samples taken.")
        self.samples_per_second = job(
            Gauge,
            "xover_job_samples_per_second",
            f"Samples per second over the job's last {RECENT_ITERATIONS} iterations.",
        )
        self.iteration_seconds = job(
            Histogram, "xover_job_iteration_seconds", "Time of one iteration.", buckets=ITERATION_BUCKETS
        )
        self.data = job(Counter, "xover_job_data_seconds_total", "Time spent loading data.")
        self.compute = job(Counter, "xover_job_compute_seconds_total", "Time spent computing (forward and backward).")
        self.communication = job(
            Counter,
            "xover_job_exposed_communication_seconds_total",
            "Time spent waiting for all-reduces (the communication not hidden behind compute).",
        )
        self.turn_wait = job(
            Histogram,
            "xover_job_turn_wait_seconds",
            "Time an iteration waited for its device's turn (crossover only).",
            buckets=WAIT_BUCKETS,
        )
        self.alone_iteration = job(
            Gauge,
            "xover_job_alone_iteration_seconds",
            "The job's iteration time alone: its profile's, else its alone run's in this experiment.",
        )
        self.slowdown = job(
            Gauge,
            "xover_job_slowdown",
            "Recent iteration time over the job's iteration time alone "
            f"(last {RECENT_ITERATIONS} iterations; 1: as fast as alone).",
        )
        self.loss = job(Gauge, "xover_job_loss", "The loss of the job's last iteration.")
        self.running = job(Gauge, "xover_job_running", "1 while the job runs, 0 once it ended.")
        self.turns_lost = job(
            Counter,
            "xover_job_turns_lost_total",
            "Ranks that gave up waiting for crossover turns and trained on without them.",
        )
        self.holder = Gauge(
            "xover_device_turn_holder",
            "1 for the job that holds (last held) the device's turn, 0 for the other jobs taking turns on it.",
            (*DEVICE_LABELS, "job"),
            registry=registry,
        )
        self.handoffs = Counter(
            "xover_device_turn_handoffs_total",
            "Times the device's turn passed from one job to another.",
            DEVICE_LABELS,
            registry=registry,
        )
        self.held = Counter(
            "xover_device_turn_held_seconds_total",
            "Time a job held the device's turn; its rate is the share of time the job held the device.",
            (*DEVICE_LABELS, "job"),
            registry=registry,
        )
        self.planned_sharing = Gauge(
            "xover_group_planned_sharing",
            "1 for the way of sharing the plan picked for the group (crossover, concurrent, mps, alone).",
            (*GROUP_LABELS, "sharing"),
            registry=registry,
        )
        self.predicted_gain = Gauge(
            "xover_group_predicted_gain",
            "The plan's predicted gain for the group: its jobs' summed speeds, each against its speed alone.",
            GROUP_LABELS,
            registry=registry,
        )


def served_names(registry: CollectorRegistry | None = None) -> set[str]:
    """Every series name the exporter serves (a counter's `_total`, a histogram's `_bucket`, `_sum`,
    `_count`, and the `_created` of both), from its registry: what a dashboard's queries may name."""
    registry = registry or CollectorRegistry()
    if not list(registry.collect()):
        Metrics(registry)
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    return {family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]}


@dataclass
class _JobState:
    labels: dict[str, str]
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_ITERATIONS))  # (wall_time, iteration_s, samples)


@dataclass
class _DeviceTurns:
    """One device's turns, settled in time order from the jobs' held spans."""

    pending: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, job)
    reported_to: dict[int, float] = field(default_factory=dict)  # running run id -> end of its last span
    jobs: set[str] = field(default_factory=set)  # every job that took a turn on it
    settled_holder: str | None = None
    latest: tuple[float, str] | None = None  # the latest span's (start, job)

    def settle(self) -> list[tuple[float, float, str]]:
        """The spans no job can come before any more, in order of start."""
        horizon = min(self.reported_to.values()) if self.reported_to else float("inf")
        self.pending.sort()
        cut = 0
        while cut < len(self.pending) and self.pending[cut][0] <= horizon:
            cut += 1
        settled, self.pending = self.pending[:cut], self.pending[cut:]
        return settled


class PrometheusSink(MetricSink):
    """Serves the run's figures on `port` while the run lasts. The port is bound when the sink is made,
    so that a port in use is refused before anything starts."""

    name = "prometheus"

    def __init__(self, port: int, facts: RunFacts | None = None, address: str = ADDRESS) -> None:
        self.port = check_port(port)
        self.facts = facts or RunFacts()
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.experiment = ""
        self.jobs: dict[int, _JobState] = {}
        self.devices: dict[tuple[str, int], _DeviceTurns] = {}
        self.measured_alone: dict[str, list[float]] = {}  # job -> iteration times of its alone runs here
        self._lock = threading.Lock()
        try:
            server, self.thread = start_http_server(port, addr=address, registry=self.registry)
            self.server: WSGIServer | None = server
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise XoverError(
                    f"--metrics-port {port}: the port is in use (choose another, or stop what listens on it)"
                ) from None
            raise XoverError(f"--metrics-port {port}: cannot serve metrics on it ({error.strerror or error})") from None

    # -- the sink --------------------------------------------------------------------------------

    def opened(self, experiment_id: str) -> None:
        """Label the run, and publish each group's planned sharing and predicted gain."""
        self.experiment = experiment_id
        for group in self.facts.groups:
            if group.sharing is not None:
                self.metrics.planned_sharing.labels(experiment_id, str(group.index), group.sharing).set(1)
            if group.predicted_gain is not None:
                self.metrics.predicted_gain.labels(experiment_id, str(group.index)).set(group.predicted_gain)

    def received(self, batch: Sequence[Received]) -> None:
        """Count each job's iterations and times; settle the turns of the devices its held spans show."""
        with self._guarded():
            touched = set()
            for job, record in batch:
                state = self._job(job)
                if isinstance(record, IterationRecord):
                    self._iteration(job, state, record)
                    if record.held:
                        touched.add(self._held(job, record.held))
                elif isinstance(record, StartRecord):
                    self.metrics.running.labels(**state.labels).set(1)
                elif isinstance(record, TurnsLostRecord):
                    self.metrics.turns_lost.labels(**state.labels).inc()
                    turns = self.devices.get(self._device(job))
                    if turns is not None and turns.reported_to.pop(job.run_id, None) is not None:
                        touched.add(self._device(job))  # it takes no more turns: none of its spans to wait for
                elif isinstance(record, EndRecord):
                    self.metrics.running.labels(**state.labels).set(0)
            for device in touched:
                self._settle(device)

    def job_ended(self, job: JobLabels, status: str) -> None:
        """The job runs no more: its running gauge drops to 0."""
        with self._guarded():
            state = self._job(job)
            self.metrics.running.labels(**state.labels).set(0)
            if job.mode == "sequential" and state.recent:
                self.measured_alone[job.job] = [iteration_s for _, iteration_s, _ in state.recent]
            for device, turns in self.devices.items():
                if turns.reported_to.pop(job.run_id, None) is not None:
                    if turns.latest is not None and turns.latest[1] == job.job:
                        turns.latest = None  # a job that ended holds nothing
                        self.metrics.holder.labels(self.experiment, device[0], str(device[1]), job.job).set(0)
                    self._settle(device)

    def closed(self, status: str) -> None:
        """The run ended: stop serving."""
        self.stop()

    def stop(self) -> None:
        """Stop serving (more than once does nothing)."""
        server = getattr(self, "server", None)  # None too when the port could not be bound
        if server is not None:
            self.server = None
            server.shutdown()
            server.server_close()
            self.thread.join(timeout=10)

    # -- the figures -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """One call at a time; a failure stops the server (a sink `deliver` leaves out is never closed)."""
        with self._lock:
            try:
                yield
            except BaseException:
                self.stop()
                raise

    def _job(self, job: JobLabels) -> _JobState:
        state = self.jobs.get(job.run_id)
        if state is None:
            labels = {
                "experiment": job.experiment_id,
                "group": "" if job.group is None else str(job.group),
                "job": job.job,
                "mode": job.mode,
                "policy": job.policy or "",
                "host": job.hosts,
            }
            state = self.jobs[job.run_id] = _JobState(labels)
            alone = self._alone_iteration_s(job.job)
            if alone:
                self.metrics.alone_iteration.labels(**labels).set(alone)
            if job.mode == "crossover":  # its turns are to come: no span of its partners' settles before them
                self.devices.setdefault(self._device(job), _DeviceTurns()).reported_to[job.run_id] = float("-inf")
        return state

    def _device(self, job: JobLabels) -> tuple[str, int]:
        facts = self.facts.jobs.get(job.job)
        return facts.device if facts is not None else (job.hosts.split(":", 1)[0], 0)

    def _alone_iteration_s(self, job: str) -> float | None:
        facts = self.facts.jobs.get(job)
        if facts is not None and facts.solo_iteration_s:
            return facts.solo_iteration_s
        measured = self.measured_alone.get(job)
        return sum(measured) / len(measured) if measured else None

    def _iteration(self, job: JobLabels, state: _JobState, record: IterationRecord) -> None:
        metrics, labels = self.metrics, state.labels
        metrics.iterations.labels(**labels).inc()
        metrics.samples.labels(**labels).inc(max(record.samples, 0))
        metrics.iteration_seconds.labels(**labels).observe(record.iteration_s)
        metrics.data.labels(**labels).inc(max(record.data_s, 0.0))
        metrics.compute.labels(**labels).inc(max(record.compute_s, 0.0))
        metrics.communication.labels(**labels).inc(max(record.communication_s, 0.0))
        if job.mode == "crossover":
            metrics.turn_wait.labels(**labels).observe(max(record.wait_s, 0.0))
        if record.loss is not None:
            metrics.loss.labels(**labels).set(record.loss)
        state.recent.append((record.wall_time, record.iteration_s, record.samples))
        recent = list(state.recent)
        if len(recent) > 1 and recent[-1][0] > recent[0][0]:
            samples_per_s = sum(samples for _, _, samples in recent[1:]) / (recent[-1][0] - recent[0][0])
        else:
            samples_per_s = record.samples / record.iteration_s if record.iteration_s > 0 else 0.0
        metrics.samples_per_second.labels(**labels).set(samples_per_s)
        alone = self._alone_iteration_s(job.job)
        if alone:
            mean_s = sum(iteration_s for _, iteration_s, _ in recent) / len(recent)
            metrics.slowdown.labels(**labels).set(mean_s / alone)

    def _held(self, job: JobLabels, held: list[list[float]]) -> tuple[str, int]:
        device = self._device(job)
        turns = self.devices.setdefault(device, _DeviceTurns())
        host, index = device[0], str(device[1])
        for start, end in held:
            turns.pending.append((start, end, job.job))
            self.metrics.held.labels(self.experiment, host, index, job.job).inc(max(end - start, 0.0))
            if turns.latest is None or start >= turns.latest[0]:
                turns.latest = (start, job.job)
        turns.reported_to[job.run_id] = max(end for _, end in held)
        turns.jobs.add(job.job)
        self.metrics.handoffs.labels(self.experiment, host, index)  # served from the first turn, at 0
        return device

    def _settle(self, device: tuple[str, int]) -> None:
        turns = self.devices[device]
        host, index = device[0], str(device[1])
        for _, _, job in turns.settle():
            if turns.settled_holder is not None and job != turns.settled_holder:
                self.metrics.handoffs.labels(self.experiment, host, index).inc()
            turns.settled_holder = job
        if turns.latest is not None:
            for job in turns.jobs:
                self.metrics.holder.labels(self.experiment, host, index, job).set(1 if job == turns.latest[1] else 0)


def run_facts(groups: Sequence[Any], planned: bool) -> RunFacts:
    """What the exporter knows before the run: each job's rank-0 device and solo iteration time (its
    profile's, which `attach_traits` found), each group's planned sharing and predicted gain."""
    jobs = {}
    for group in groups:
        for job in group.jobs:
            host, indices = next(iter(job.devices.items()))
            jobs[job.name] = JobFacts(
                device=(host, indices[0]), solo_iteration_s=job.traits.solo_iteration_s if job.traits else None
            )
    return RunFacts(
        jobs=jobs,
        groups=tuple(
            GroupFacts(group.index, group.sharing if planned else None, group.predicted_gain) for group in groups
        ),
    )
