"""What a turn server serves to Prometheus: the turns of its host's devices, as they happen.

A server started with `--metrics-address ADDRESS` (xover run does so when it has a Prometheus exporter,
`--metrics-port`) serves Prometheus' text format on a port of its own, chosen by the kernel, which it
says on stdout (`metrics PORT`) before `ready`; the launcher hands every server's HOST:PORT to the
run's exporter, which lists them for Prometheus' HTTP service discovery (run/exporter.py, `/targets`).
So every host of a group serves its own devices, on its own machine, across hosts and under Slurm.
It serves them as the exporter does (`serve_http`, below): over TLS with the user's certificate, to the
user's bearer token only (both from its launcher, on its stdin: turns/credentials.py), on every address
family of ADDRESS (XOVER_METRICS_ADDRESS; loopback by default) on one port, never on a port that anyone
holds on either family.

Every series carries experiment, group, host (the host's name as the launcher reaches it) and device;
the per-job ones carry job as well. The figures are updated by the server's loop after each decision
(`decided`), and read by prometheus_client's HTTP thread: its metric objects take their own locks.
"""

from __future__ import annotations

import errno
import hmac
import io
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..settings import whole_number
from .credentials import MetricsCredentials

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

ADDRESS = "localhost"  # loopback only, unless XOVER_METRICS_ADDRESS says otherwise (settings.py)
DEVICE_LABELS = ("experiment", "group", "host", "device")
LABELS = ("experiment", "group", "host")  # what the launcher gives a server (`--metrics-label KEY=VALUE`)
WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# A scrape's thread holds the interpreter while it writes the text; the server's loop, woken by a request,
# waits for it at most this long (Python's default switch interval is 5 ms, longer than many turns).
SWITCH_INTERVAL_S = 0.0005
# Anyone who reaches the port may connect: a connection has this long from its acceptance to the end of
# its answer (its TLS handshake, its request and the response: a deadline, not a limit per read, which a
# client sending a byte every few seconds never reached), may send at most MAX_REQUEST_BYTES (a scrape's
# request is under 1 KiB; http.server alone takes up to 100 header lines of 64 KiB each), and past
# MAX_CONNECTIONS at once a new one is closed at once: a flood of connections costs a few threads and a
# few hundred KiB, never the process its memory (the turns go on regardless: their loop is another thread).
REQUEST_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 16384
MAX_CONNECTIONS = 32
PICKS = 20  # ports the kernel picks for a server, until one is free on every family it listens on

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def listening_addresses(address: str) -> list[tuple[socket.AddressFamily, str]]:
    """Where a metrics server listens for XOVER_METRICS_ADDRESS `address`. Loopback and every interface are
    taken on IPv4 and IPv6 alike, on one port: a port free on one family could be held on the other by
    anyone, who would then answer the clients that reach it by a name of both (`localhost` is ::1 first on
    many hosts). One address of an interface is taken alone."""
    if address in ("localhost", "127.0.0.1", "::1"):
        return [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
    if address in ("0.0.0.0", "::"):
        return [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")]
    return [(socket.AF_INET6 if ":" in address else socket.AF_INET, address)]


def _held_beside(families: list[tuple[socket.AddressFamily, str]], port: int) -> list[socket.socket]:
    """For one address of an interface, its port on every address of the other family, bound but never
    listening (a connection there is refused): nobody else can hold the port there while it serves, and
    one held there already is refused (EADDRINUSE), as for loopback and every interface."""
    if len(families) != 1:
        return []
    family = socket.AF_INET if families[0][0] == socket.AF_INET6 else socket.AF_INET6
    guard = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            guard.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        guard.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    except OSError as error:
        guard.close()
        if error.errno in _NO_FAMILY:  # no such family here: nobody can listen there either
            return []
        raise
    return [guard]


class _Deadline:
    """A connection's socket, read and written until one deadline (time.monotonic()) and no further."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.connection, self.deadline = connection, deadline

    def left(self) -> float:
        """Seconds left; ConnectionAbortedError once there are none (wsgiref takes it for a client gone)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ConnectionAbortedError("the request's deadline passed")
        return left


class _RequestReader(io.RawIOBase):
    """The request's bytes, until the deadline and at most MAX_REQUEST_BYTES of them."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.until = _Deadline(connection, deadline)
        self.taken = 0

    def readable(self) -> bool:
        """A stream to read from."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Read what has come (one recv), within what is left of the deadline and of the bytes allowed."""
        if self.taken >= MAX_REQUEST_BYTES:
            raise ConnectionAbortedError(f"a request longer than {MAX_REQUEST_BYTES} bytes")
        view = memoryview(buffer)[: MAX_REQUEST_BYTES - self.taken]
        connection = self.until.connection
        connection.settimeout(self.until.left())
        try:
            count = connection.recv_into(view)
        except TimeoutError:
            raise ConnectionAbortedError("the request's deadline passed") from None
        self.taken += count
        return count


class _ResponseWriter(io.RawIOBase):
    """The response, written until the deadline (a client that reads nothing holds no thread past it)."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.until = _Deadline(connection, deadline)

    def writable(self) -> bool:
        """A stream to write to."""
        return True

    def write(self, data: Any) -> int:
        """Write all of `data`, or raise ConnectionAbortedError at the deadline."""
        view = memoryview(data)
        connection = self.until.connection
        while view:
            connection.settimeout(self.until.left())
            try:
                view = view[connection.send(view) :]
            except TimeoutError:
                raise ConnectionAbortedError("the request's deadline passed") from None
        return len(data)


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """One address family's listening socket: a thread per connection, at most MAX_CONNECTIONS at once over
    every family of the endpoint (`slots`), TLS where a context is given."""

    daemon_threads = True  # a scrape in flight never holds the process's end
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        app: WsgiApp,
        slots: threading.BoundedSemaphore,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.address_family = family
        self.slots, self.tls = slots, tls
        super().__init__(address, _QuietHandler)
        self.set_app(app)

    def server_bind(self) -> None:
        """Bind, IPv6 for IPv6 alone (IPv4 has a socket of its own), without the reverse look-up of its name."""
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])
        self.setup_environ()

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
        """A connection that timed out, broke, sent too much or failed its TLS handshake is the client's
        affair: nothing said (socketserver would print a traceback for each, on the run's terminal);
        anything else, one line."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # ssl.SSLError and the deadline's ConnectionAbortedError too
            return
        print(f"xover: serving metrics to {client_address[0]} failed: {error!r}", file=sys.stderr, flush=True)


class _QuietHandler(WSGIRequestHandler):
    """One request, within REQUEST_TIMEOUT_S of the connection's acceptance, over TLS where the server has it."""

    server: _BoundedServer

    def setup(self) -> None:
        """The TLS handshake, then the request's reader and the response's writer, all under one deadline."""
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        if self.server.tls is not None:
            self.request.settimeout(REQUEST_TIMEOUT_S)  # the handshake is one call, bounded by it as a whole
            try:
                self.request = self.server.tls.wrap_socket(self.request, server_side=True)
            except TimeoutError:
                raise ConnectionAbortedError("the TLS handshake's deadline passed") from None
        super().setup()
        self.rfile.close()  # the buffered reader socketserver made: replaced by one bound to the deadline
        self.rfile = io.BufferedReader(_RequestReader(self.connection, deadline))
        self.wfile = _ResponseWriter(self.connection, deadline)  # type: ignore[assignment]  # a raw writer, unbuffered

    def finish(self) -> None:
        """Close the connection (TLS's too: socketserver closes only the socket it accepted)."""
        try:
            super().finish()
        finally:
            self.connection.close()

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing on stderr for each scrape."""


def authorized(app: WsgiApp, token: str) -> WsgiApp:
    """`app` for a request that carries `Authorization: Bearer TOKEN` (compared in constant time); any
    other request is answered 401 and reaches nothing."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = str(environ.get("HTTP_AUTHORIZATION", "")).strip().encode(errors="replace")
        if not hmac.compare_digest(given, expected):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Bearer realm="xover"'), ("Content-Length", "0")])
            return [b""]
        return app(environ, start_response)

    return guarded


class MetricsHttp:
    """An endpoint that serves its figures: one listening socket per address family, on one port."""

    def __init__(self, servers: list[_BoundedServer], guards: list[socket.socket]) -> None:
        self.servers, self.guards = servers, guards
        self.port = servers[0].server_port
        self.threads = [
            threading.Thread(target=server.serve_forever, name="xover-metrics", daemon=True) for server in servers
        ]
        for thread in self.threads:
            thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving on every family."""
        for server in self.servers:
            server.shutdown()
            server.server_close()
        for guard in self.guards:
            guard.close()
        for thread in self.threads:
            thread.join(timeout=timeout_s)


def serve_http(address: str, port: int, app: WsgiApp, credentials: MetricsCredentials | None) -> MetricsHttp:
    """Serve `app` from threads of their own on every socket `listening_addresses(address)` names, all on
    `port` (0: a port the kernel picks that is free on each), over TLS and only to a request with the bearer
    token of `credentials` (None: plain HTTP to anyone, for tests of the serving alone). OSError if it
    cannot: EADDRINUSE where any family's socket is held by someone else. What the run's exporter and each
    turn server serve their figures with."""
    tls = credentials.tls_context() if credentials is not None else None
    served = authorized(app, credentials.token) if credentials is not None else app
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    families = listening_addresses(address)
    for pick in range(PICKS if port == 0 else 1):
        servers: list[_BoundedServer] = []
        try:
            for family, host in families:
                try:
                    servers.append(
                        _BoundedServer((host, servers[0].server_port if servers else port), family, served, slots, tls)
                    )
                except OSError as error:
                    # a host without IPv6 (or without ::1): nobody can listen there either
                    if family == socket.AF_INET6 and len(families) > 1 and error.errno in _NO_FAMILY:
                        continue
                    raise
            guards = _held_beside(families, servers[0].server_port)
            return MetricsHttp(servers, guards)
        except OSError as error:
            for server in servers:
                server.server_close()
            if port != 0 or error.errno != errno.EADDRINUSE or pick == PICKS - 1:
                raise
    raise AssertionError("unreachable")


_NO_FAMILY = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


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
        # prometheus_client is loaded by a server that serves figures, not by every turn server
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.free = Gauge(
            "xover_device_without_turns",
            "1 while the job computes on the device without turns (an adaptive group's state without them).",
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
        for metric in (self.holder, self.held, self.waits, self.revoked, self.lost, self.free):
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

    def without_turns(self, device: int, slot: int, free: bool) -> None:
        """`slot` computes on the device without turns from now (`free`), or takes turns again."""
        self.free.labels(**self._job(device, slot)).set(1 if free else 0)

    def revoked_from(self, device: int, slot: int) -> None:
        """The turn was taken back from `slot` (its lease ran out)."""
        self.revoked.labels(**self._job(device, slot)).inc()

    def lost_by(self, device: int, slot: int) -> None:
        """`slot` lost its turns on the device (its rank died, left unannounced or stopped reading)."""
        self.lost.labels(**self._job(device, slot)).inc()

    # -- serving ------------------------------------------------------------------------------

    def serve(
        self,
        address: str = ADDRESS,
        ports: tuple[int, int] | None = None,
        credentials: MetricsCredentials | None = None,
    ) -> int:
        """Serve the figures on the first port of `ports` (LOW, HIGH) that is free on every family `address`
        takes, or on one the kernel picks; that port. Over TLS, to scrapes with the token of `credentials`.
        OSError when none can be bound (every port of the range taken: EADDRINUSE)."""
        http = None
        for port in range(ports[0], ports[1] + 1) if ports is not None else (0,):
            try:
                from prometheus_client import make_wsgi_app

                http = serve_http(address, port, make_wsgi_app(self.registry), credentials)
                break
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
        if http is None:
            assert ports is not None
            raise OSError(errno.EADDRINUSE, f"every port from {ports[0]} to {ports[1]} is in use")
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.http: MetricsHttp | None = http
        return http.port

    def stop(self) -> None:
        """Stop serving (more than once does nothing)."""
        http = getattr(self, "http", None)
        if http is not None:
            self.http = None
            self.server_up.labels(**self.base).set(0)
            http.stop(timeout_s=0)


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
