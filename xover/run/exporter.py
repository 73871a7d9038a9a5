"""The Prometheus exporter: a run's figures served live in Prometheus' text format (`xover run
--metrics-port PORT`, or XOVER_METRICS_PORT).

A metric sink (sinks.py) with a registry of its own (prometheus_client's CollectorRegistry) and an HTTP
server on PORT for the whole run. Everything it serves comes from the run's metric records as they
arrive (xover/records.py) and from what the run knows before it starts (the plan's picks and
predictions, the jobs' profiles):

    per job     labels experiment, group, job, mode, policy, host (the job's -H hosts)
    per group   labels experiment, group: the plan's way of sharing and its predicted gain; an adaptive
                group's way now, each way's last measured aggregate and its decisions

The devices' turns are served by the turn servers themselves, each on its own host (turns/metrics.py),
as they happen: which job holds each device, handoffs, time held, waits. While they run, the exporter
lists them at `/targets` in the form of Prometheus' HTTP service discovery (`http_sd_configs`), so one
exporter's address is all a Prometheus server is told. A server on the exporter's own machine is listed
under the host name the request came to (what Prometheus reached the exporter by).
The list of metrics, with their meaning, is in docs/reference.md; docs/grafana/xover.json charts them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from ..errors import XoverError
from ..hosts import is_local
from ..records import EndRecord, IterationRecord, StartRecord, TurnsLostRecord
from ..settings import settings
from ..sharing import Mode, turn_taking
from ..turns.credentials import MetricsCredentials, metrics_credentials
from ..turns.metrics import WAIT_BUCKETS, MetricsHttp, TurnMetrics, WsgiApp, serve_http
from ..turns.service import TurnServerEndpoint
from .sinks import GroupLabels, JobLabels, MetricSink, Received

_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)

JOB_LABELS = ("experiment", "group", "job", "mode", "policy", "host")
GROUP_LABELS = ("experiment", "group")
ITERATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RECENT_ITERATIONS = 20  # the window of a job's samples per second and slowdown
TARGETS_PATH = "/targets"  # the turn servers serving now, for Prometheus' http_sd_configs


@dataclass(frozen=True)
class JobFacts:
    """What the run knows of a job before it starts."""

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
        def job(kind: type[_Metric], name: str, text: str, **options: Any) -> _Metric:
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
        self.sharing_way = Gauge(
            "xover_group_sharing_way",
            "An adaptive group: 1 for the way of sharing it runs in now (crossover: turns; concurrent or mps: "
            "none), 0 for the other.",
            (*GROUP_LABELS, "way"),
            registry=registry,
        )
        self.adaptive_aggregate = Gauge(
            "xover_group_adaptive_aggregate",
            "An adaptive group: its jobs' summed speeds relative to alone, as last measured in each way.",
            (*GROUP_LABELS, "way"),
            registry=registry,
        )
        self.adaptive_decisions = Counter(
            "xover_group_adaptive_decisions_total",
            "An adaptive group's decisions: each time it settled on a way (after probing, or staying as it is).",
            GROUP_LABELS,
            registry=registry,
        )


def served_names(registry: CollectorRegistry | None = None) -> set[str]:
    """Every series name the exporter and the turn servers serve (a counter's `_total`, a histogram's
    `_bucket`, `_sum`, `_count`, and the `_created` of both), from their registries: what a dashboard's
    queries may name."""
    if registry is None:
        registry = CollectorRegistry()
        Metrics(registry)
        TurnMetrics({}, {}, {}, registry=registry)
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    return {family.name + suffix for family in registry.collect() for suffix in suffixes[family.type]}


@dataclass
class _JobState:
    labels: dict[str, str]
    recent: deque[tuple[float, float, int]] = field(  # (wall_time, iteration_s, samples)
        default_factory=lambda: deque(maxlen=RECENT_ITERATIONS)
    )


def _host_of(environ: dict[str, Any]) -> str:
    """The host name a request came to (its Host header without the port), else the server's own name."""
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "localhost")
    if host.startswith("["):  # [v6 address]:port
        return host[: host.index("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class PrometheusSink(MetricSink):
    """Serves the run's figures on `port` while the run lasts. The port is bound when the sink is made,
    so that a port in use is refused before anything starts."""

    name = "prometheus"
    wants_turn_servers = True

    def __init__(
        self,
        port: int,
        facts: RunFacts | None = None,
        address: str | None = None,
        credentials: MetricsCredentials | None = None,
    ) -> None:
        """`address`: where to listen (None: XOVER_METRICS_ADDRESS, loopback by default); `credentials`: the
        TLS certificate and token Prometheus is told (None: the user's, made where missing)."""
        self.port = check_port(port)
        self.facts = facts or RunFacts()
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.experiment = ""
        self.jobs: dict[int, _JobState] = {}
        self.measured_alone: dict[str, list[float]] = {}  # job -> iteration times of its alone runs here
        self.turn_endpoints: dict[str, tuple[TurnServerEndpoint, ...]] = {}  # by unit, while its servers run
        self.adaptive_ways: dict[tuple[str, str], set[str]] = {}  # an adaptive group's ways so far
        self.decided: set[tuple[str, str, int]] = set()  # its settled segments counted
        self._lock = threading.Lock()
        self.address = settings().metrics_address if address is None else address
        self.credentials = metrics_credentials() if credentials is None else credentials  # the turn servers' too
        try:
            self.http: MetricsHttp | None = serve_http(self.address, port, self._app(), self.credentials)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise XoverError(
                    f"--metrics-port {port}: the port is in use on {self.address} (IPv4 or IPv6; choose another, "
                    "or stop what listens on it)"
                ) from None
            raise XoverError(
                f"--metrics-port {port}: cannot serve metrics on {self.address} ({error.strerror or error})"
            ) from None

    def _app(self) -> WsgiApp:
        """prometheus_client's WSGI app for /metrics, and the turn servers' list at TARGETS_PATH."""
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != TARGETS_PATH:
                served: Iterable[bytes] = metrics(environ, start_response)
                return served
            body = json.dumps(self.targets(_host_of(environ))).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        return app

    def targets(self, this_host: str) -> list[dict[str, Any]]:
        """The turn servers serving now, as Prometheus' HTTP service discovery lists targets: one group of
        targets per experiment and group; a server on this machine under `this_host`."""
        with self._lock:
            endpoints = [endpoint for unit in self.turn_endpoints.values() for endpoint in unit]
        groups: dict[tuple[str, str], list[str]] = {}
        for endpoint in endpoints:
            host = this_host if is_local(endpoint.host) else endpoint.host
            groups.setdefault((endpoint.experiment, endpoint.group), []).append(f"{host}:{endpoint.port}")
        return [
            {"targets": sorted(found), "labels": {"__meta_xover_experiment": experiment, "__meta_xover_group": group}}
            for (experiment, group), found in sorted(groups.items())
        ]

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
        """Count each job's iterations and times."""
        with self._guarded():
            for job, record in batch:
                state = self._job(job)
                if isinstance(record, IterationRecord):
                    self._iteration(job, state, record)
                elif isinstance(record, StartRecord):
                    self.metrics.running.labels(**state.labels).set(1)
                elif isinstance(record, TurnsLostRecord):
                    self.metrics.turns_lost.labels(**state.labels).inc()
                elif isinstance(record, EndRecord):
                    self.metrics.running.labels(**state.labels).set(0)

    def job_ended(self, job: JobLabels, status: str) -> None:
        """The job runs no more: its running gauge drops to 0."""
        with self._guarded():
            state = self._job(job)
            self.metrics.running.labels(**state.labels).set(0)
            if job.mode == Mode.SEQUENTIAL and state.recent:
                self.measured_alone[job.job] = [iteration_s for _, iteration_s, _ in state.recent]

    def adaptive_segment(self, group: GroupLabels, segment: Mapping[str, Any]) -> None:
        """An adaptive group's way now (the open segment's), each way's last measured aggregate, its decisions."""
        with self._guarded():
            labels = (group.experiment_id, "" if group.group is None else str(group.group))
            key = (*labels, segment["seq"])
            if segment["ended"] is None:
                ways = self.adaptive_ways.setdefault(labels, set())
                ways.update({segment["way"], *(segment.get("decision") or {}).get("ways", {})})
                for way in ways:
                    self.metrics.sharing_way.labels(*labels, way).set(1 if way == segment["way"] else 0)
                if segment["kind"] == "settled" and key not in self.decided:
                    self.decided.add(key)
                    self.metrics.adaptive_decisions.labels(*labels).inc()
            if segment.get("aggregate") is not None:
                self.metrics.adaptive_aggregate.labels(*labels, segment["way"]).set(segment["aggregate"])

    def turn_servers(self, unit: str, endpoints: Sequence[TurnServerEndpoint]) -> None:
        """List a unit's turn servers at TARGETS_PATH while they serve; forget them once they stopped."""
        with self._lock:
            if endpoints:
                self.turn_endpoints[unit] = tuple(endpoints)
            else:
                self.turn_endpoints.pop(unit, None)

    def closed(self, status: str) -> None:
        """The run ended: stop serving."""
        self.stop()

    def stop(self) -> None:
        """Stop serving (more than once does nothing)."""
        http = getattr(self, "http", None)  # None too when the port could not be bound
        if http is not None:
            self.http = None
            http.stop()

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
        return state

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
        if turn_taking(job.mode):
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


def run_facts(groups: Sequence[Any], planned: bool) -> RunFacts:
    """What the exporter knows before the run: each job's solo iteration time (its profile's, which
    `attach_traits` found), each group's planned sharing and predicted gain."""
    jobs = {}
    for group in groups:
        for job in group.jobs:
            jobs[job.name] = JobFacts(solo_iteration_s=job.traits.solo_iteration_s if job.traits else None)
    return RunFacts(
        jobs=jobs,
        groups=tuple(
            GroupFacts(group.index, group.sharing if planned else None, group.predicted_gain) for group in groups
        ),
    )
