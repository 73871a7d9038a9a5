"""What a turn server serves to Prometheus: the turns of its host's devices, as they happen.

A server started with `--metrics-address ADDRESS` (xover run does so when it has a Prometheus exporter,
`--metrics-port`) serves Prometheus' text format on a port of its own, chosen by the kernel, which it
says on stdout (`metrics PORT`) before `ready`; the launcher hands every server's HOST:PORT to the
run's exporter, which lists them for Prometheus' HTTP service discovery (run/exporter.py, `/targets`).
So every host of a group serves its own devices, on its own machine, across hosts and under Slurm.

Every series carries experiment, group, host (the host's name as the launcher reaches it) and device;
the per-job ones carry job as well. The figures are updated by the server's loop after each decision
(`decided`), and read by prometheus_client's HTTP thread: its metric objects take their own locks.
"""

from __future__ import annotations

import errno
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from ..settings import whole_number

ADDRESS = "0.0.0.0"  # every interface: a Prometheus server elsewhere scrapes it
DEVICE_LABELS = ("experiment", "group", "host", "device")
LABELS = ("experiment", "group", "host")  # what the launcher gives a server (`--metrics-label KEY=VALUE`)
WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# A scrape's thread holds the interpreter while it writes the text; the server's loop, woken by a request,
# waits for it at most this long (Python's default switch interval is 5 ms, longer than many turns).
SWITCH_INTERVAL_S = 0.0005
# Anyone who reaches the port may connect: a connection that sends no request in this long is closed,
# and past this many at once a new one is closed at once, so that a flood of idle connections costs a
# few threads, never the process its memory (the turns go on regardless: their loop is another thread).
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most MAX_CONNECTIONS at once."""

    daemon_threads = True  # a scrape in flight never holds the process's end
    block_on_close = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own, or close it at once when every slot is taken."""
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """One connection, then its slot is free again."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that timed out or broke is the client's affair: nothing said (socketserver would
        print a traceback for each, on the run's terminal); anything else, one line."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            return
        print(f"xover: serving metrics to {client_address[0]} failed: {error!r}", file=sys.stderr, flush=True)


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing on stderr for each scrape."""


def serve_http(address: str, port: int, app: WsgiApp) -> tuple[WSGIServer, threading.Thread]:
    """Serve `app` on address:port (0: a port the kernel picks) from a thread of its own; OSError if it
    cannot bind. What the run's exporter and each turn server serve their figures with."""
    server = make_server(address, port, app, _BoundedServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="xover-metrics", daemon=True)
    thread.start()
    return server, thread


class TurnMetrics:
    """One server's figures: per device, who holds the turn, handoffs, time held, waits, revocations and
    turns lost, per job. Made for every (device, slot) the server was started with, so that each series
    is served at 0 from the first scrape."""

    def __init__(
        self,
        labels: Mapping[str, str],
        names: Mapping[int, str],
        devices: Mapping[int, Sequence[int]],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.names = dict(names)
        self.base = {key: labels.get(key, "") for key in LABELS}
        registry = self.registry
        per_job = (*DEVICE_LABELS, "job")
        self.holder = Gauge(
            "xover_device_turn_holder",
            "1 for the job that holds the device's turn now, 0 for the other jobs taking turns on it.",
            per_job,
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
            per_job,
            registry=registry,
        )
        self.waits = Histogram(
            "xover_device_turn_wait_seconds",
            "Time a job's rank on the device waited from asking for the turn to getting it.",
            per_job,
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.revoked = Counter(
            "xover_device_turns_revoked_total",
            "Turns taken back from a job that held the device far longer than it usually does (its lease).",
            per_job,
            registry=registry,
        )
        self.lost = Counter(
            "xover_device_turns_lost_total",
            "Times a job lost its turns on the device: its rank there died, left unannounced or stopped reading.",
            per_job,
            registry=registry,
        )
        self.server_up = Gauge(
            "xover_turn_server_up", "1 while the host's turn server serves its devices.", LABELS, registry=registry
        )
        self.server_up.labels(**self.base).set(1)
        self.holders: dict[int, int | None] = {}  # device -> the slot whose hold is being counted
        self.since: dict[int, float] = {}  # device -> when that hold began (time.monotonic())
        self.last: dict[int, int] = {}  # device -> the last slot that held it (for handoffs)
        self._per_job: dict[tuple[int, int], dict[str, str]] = {}
        for device, slots in devices.items():
            self.handoffs.labels(**self._device(device))
            for slot in slots:
                self._touch(device, slot)

    def _device(self, device: int) -> dict[str, str]:
        return {**self.base, "device": str(device)}

    def _job(self, device: int, slot: int) -> dict[str, str]:
        labels = self._per_job.get((device, slot))
        if labels is None:
            labels = self._per_job[(device, slot)] = {**self._device(device), "job": self.names.get(slot, str(slot))}
        return labels

    def _touch(self, device: int, slot: int) -> None:
        labels = self._job(device, slot)
        for metric in (self.holder, self.held, self.waits, self.revoked, self.lost):
            metric.labels(**labels)

    # -- what the server tells it -------------------------------------------------------------

    def granted(self, device: int, slot: int, waited_s: float) -> None:
        """`slot` got the device's turn after waiting `waited_s`."""
        self.waits.labels(**self._job(device, slot)).observe(max(waited_s, 0.0))

    def decided(self, device: int, holder: int | None, now: float) -> None:
        """The device's holder after a decision (None: nobody): ends the last hold, begins the next."""
        current = self.holders.get(device)
        if holder == current:
            return
        if current is not None:
            self.held.labels(**self._job(device, current)).inc(max(now - self.since[device], 0.0))
            self.holder.labels(**self._job(device, current)).set(0)
        self.holders[device] = holder
        if holder is None:
            return
        self.since[device] = now
        self.holder.labels(**self._job(device, holder)).set(1)
        previous = self.last.get(device)
        if previous is not None and previous != holder:
            self.handoffs.labels(**self._device(device)).inc()
        self.last[device] = holder

    def revoked_from(self, device: int, slot: int) -> None:
        """The turn was taken back from `slot` (its lease ran out)."""
        self.revoked.labels(**self._job(device, slot)).inc()

    def lost_by(self, device: int, slot: int) -> None:
        """`slot` lost its turns on the device (its rank died, left unannounced or stopped reading)."""
        self.lost.labels(**self._job(device, slot)).inc()

    # -- serving ------------------------------------------------------------------------------

    def serve(self, address: str = ADDRESS, ports: tuple[int, int] | None = None) -> int:
        """Serve the figures on the first free port of `ports` (LOW, HIGH), or on one the kernel picks;
        that port. OSError when none can be bound (every port of the range taken: EADDRINUSE)."""
        server = None
        for port in range(ports[0], ports[1] + 1) if ports is not None else (0,):
            try:
                server, self.thread = serve_http(address, port, make_wsgi_app(self.registry))
                break
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
        if server is None:
            assert ports is not None
            raise OSError(errno.EADDRINUSE, f"every port from {ports[0]} to {ports[1]} is in use")
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.server: WSGIServer | None = server
        return int(server.server_port)

    def stop(self) -> None:
        """Stop serving (more than once does nothing)."""
        server = getattr(self, "server", None)
        if server is not None:
            self.server = None
            self.server_up.labels(**self.base).set(0)
            server.shutdown()
            server.server_close()


def parse_labels(specs: Sequence[str]) -> dict[str, str]:
    """['experiment=e1', 'host=xo-h1'] -> {'experiment': 'e1', 'host': 'xo-h1'}; a key not in LABELS is a
    ValueError naming it."""
    labels = {}
    for spec in specs:
        key, separator, value = spec.partition("=")
        if not separator or key not in LABELS:
            raise ValueError(f"--metrics-label {spec!r}: expected KEY=VALUE with KEY one of {', '.join(LABELS)}")
        labels[key] = value
    return labels


def parse_names(specs: Sequence[str]) -> dict[int, str]:
    """['0=mlp-digits'] -> {0: 'mlp-digits'}: each slot's job name, for the `job` label."""
    names = {}
    for spec in specs:
        slot, separator, name = spec.partition("=")
        number = whole_number(slot)
        if not separator or number is None or not name:
            raise ValueError(f"--slot-name {spec!r}: expected SLOT=JOB, e.g. 0=mlp-digits")
        names[number] = name
    return names
