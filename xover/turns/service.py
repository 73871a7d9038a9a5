"""The launcher's side of the turn service: a group's turn servers, one per host of the group.

Each host's server is started through the path the engine uses to reach that host (directly here,
over ssh elsewhere), is driven through its stdin (job ended: withdraw its slot; quit) and ends when
that stdin closes, so nothing outlives the run on any host. Independent servers stay consistent
because every device decides by the same policy from the same events, and a job's all-reduces keep
its ranks in step. Workers find their host's server through XOVER_TURN_SOCKET, a template whose
`{host}` they fill in (emulated hosts share one filesystem, so each host's socket has its own name).

Starting a server waits for its `ready` at most START_TIMEOUT_S (or until the run's --timeout, if
sooner): an ssh that hangs, or a host that never answers, fails the start with a clear error instead
of holding the run for ever. Each server streams the first grants of iterations that are over
(`spans` lines); they are folded into a bounded sample of rank skews here as they come.

An adaptive group's servers run its devices with turns or without (server.py); `switch` moves every
host's devices from one to the other at one iteration of each job: it asks every server for each job's
iterations so far, and names the iteration after the most any host has seen, plus a margin, to them all.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from typing import Any

from ..config import xover_pythonpath
from ..errors import TimedOut, XoverError
from ..hosts import LOCAL, command_on, is_local
from ..processes import sweep
from ..settings import EXPERIMENT_VARIABLE, TURN_SERVER_VARIABLE, settings
from .credentials import MetricsCredentials
from .policies import SlotTraits
from .protocol import TURNS, host_tag
from .server import FolderError, private_folder

START_TIMEOUT_S = 60.0  # for a server to say `ready`, through ssh on another host
MAX_SKEWS = 1 << 18  # rank skews kept per slot; past it, every other one (an even sample of the whole run)
MAX_OPEN_ITERATIONS = 4096  # per slot, iterations waiting for another host's first grants
SWITCH_ANSWER_S = 2.0  # for every host's server to answer P (its counts) before a switch is given up


def runtime_dir() -> str:
    """Per-user directory, owner-only, for the sockets of every run of this user on this host."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/xover-{os.getuid()}"
    path = os.path.join(base, "xover") if os.environ.get("XDG_RUNTIME_DIR") else base
    try:
        return private_folder(path)
    except FolderError as error:
        raise XoverError(str(error)) from None


@dataclass(frozen=True)
class ServedTurns:
    """What a group's turn servers label the figures they serve to Prometheus with (turns/metrics.py):
    each slot's job name, and the experiment and group; each server adds its host."""

    experiment: str
    group: str
    jobs: tuple[str, ...]  # by slot
    credentials: MetricsCredentials  # handed to each server on its stdin: its TLS certificate and the token
    ports: tuple[int, int] | None = None  # XOVER_TURN_METRICS_PORTS: each server takes the first free one
    address: str = "localhost"  # XOVER_METRICS_ADDRESS: where each server listens, on its own host

    def arguments(self, host: str) -> list[str]:
        """The server's options that have it serve its figures on `address` of its host, with the credentials
        it reads from its stdin first. This machine's server is labelled with its name (for a cluster's
        Prometheus, `localhost` names no host)."""
        name = socket.gethostname() if is_local(host) else host
        labels = {"experiment": self.experiment, "group": self.group, "host": name}
        args = ["--metrics-address", self.address, "--metrics-credentials-stdin"]
        if self.ports is not None:
            args.append(f"--metrics-ports={self.ports[0]}-{self.ports[1]}")
        args += [f"--metrics-label={key}={value}" for key, value in labels.items()]
        return args + [f"--slot-name={slot}={job}" for slot, job in enumerate(self.jobs)]


@dataclass(frozen=True)
class TurnServerEndpoint:
    """Where one host's turn server serves its devices' figures: HOST:PORT, as the launcher reaches the host."""

    host: str
    port: int
    experiment: str
    group: str


def server_arguments(
    socket_path: str,
    devices: dict[int, list[int]],
    policy: str,
    traits: dict[int, SlotTraits],
    lease: dict[str, float] | None = None,
    nice: int | None = None,
    state: str = TURNS,
) -> list[str]:
    """The turn server's command line (after the Python interpreter)."""
    args = ["-m", "xover.turns.server", "--socket", socket_path, "--policy", policy, "--control-stdin"]
    if state != TURNS:
        args += ["--state", state]
    args += [f"--device={d}={','.join(map(str, slots))}" for d, slots in sorted(devices.items())]
    for slot, trait in sorted(traits.items()):
        values = {"rank": trait.rank, "max_slowdown": trait.max_slowdown, "solo_s": trait.solo_iteration_s}
        text = ",".join(f"{k}={v:.6g}" for k, v in values.items() if v is not None)
        if text:
            args.append(f"--slot={slot}:{text}")
    for key, value in (lease or {}).items():
        args += [f"--lease-{key}", str(value)]
    if nice is not None:
        args += ["--nice", str(nice)]
    heartbeat = settings().turn_heartbeat
    if heartbeat is not None:
        args += ["--heartbeat", str(heartbeat)]
    send_buffer = settings().turn_send_buffer
    if send_buffer is not None:
        args += ["--send-buffer", str(send_buffer)]
    return args


def _readline_within(process: subprocess.Popen, timeout_s: float) -> str | None:
    """The first line of the process's stdout, stripped; None if none came within `timeout_s`. Read by a
    thread (the same buffered stream goes on to the reader), which ends once the process is killed."""
    line: list[bytes] = []
    stdout = process.stdout
    assert stdout is not None  # piped
    reading = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reading.start()
    reading.join(timeout_s)
    if reading.is_alive():
        return None
    return line[0].decode(errors="replace").strip()


class GrantSkews:
    """Rank skew per slot (how far apart the first grants of one iteration were over all the job's
    devices), from the spans every host's server streams. An iteration is complete once every host of
    the slot has sent its span; its skew is then kept, in a bounded sample, and the span forgotten."""

    def __init__(self, hosts_of_slot: dict[int, int]) -> None:
        self.hosts_of_slot = hosts_of_slot
        self.lock = threading.Lock()
        self.open: dict[int, dict[int, list]] = {}  # slot -> iteration -> [first, last, devices, hosts]
        self.skews: dict[int, array] = {}
        self.stride: dict[int, int] = {}  # keep every stride-th skew (doubles each time the sample is full)
        self.seen: dict[int, int] = {}  # skews offered, for the stride
        self.iterations: dict[int, int] = {}
        self.largest: dict[int, float] = {}

    def add(self, spans: list) -> None:
        """[[slot, iteration, first, last, devices], ...] from one host."""
        with self.lock:
            for slot, iteration, first, last, devices in spans:
                slot, iteration = int(slot), int(iteration)
                entry = self.open.setdefault(slot, {}).get(iteration)
                if entry is None:
                    entry = self.open[slot][iteration] = [first, last, 0, 0]
                entry[0], entry[1] = min(entry[0], first), max(entry[1], last)
                entry[2] += int(devices)
                entry[3] += 1
                if entry[3] >= self.hosts_of_slot.get(slot, 1):
                    self._close(slot, iteration)
            for slot, iterations in self.open.items():
                while len(iterations) > MAX_OPEN_ITERATIONS:  # a host that stopped sending: go on without it
                    self._close(slot, min(iterations))

    def _close(self, slot: int, iteration: int) -> None:
        first, last, devices, _ = self.open[slot].pop(iteration)
        self.iterations[slot] = self.iterations.get(slot, 0) + 1
        if devices <= 1:
            return
        skew = (last - first) * 1000
        self.largest[slot] = max(self.largest.get(slot, skew), skew)
        seen = self.seen[slot] = self.seen.get(slot, 0) + 1
        stride = self.stride.setdefault(slot, 1)
        if (seen - 1) % stride:
            return
        kept = self.skews.setdefault(slot, array("d"))
        kept.append(skew)
        if len(kept) >= MAX_SKEWS:
            self.skews[slot] = kept[::2]
            self.stride[slot] = stride * 2

    def summary(self, slot: int) -> dict:
        """What the hosts said of a slot's turns, merged."""
        with self.lock:
            for iteration in sorted(self.open.get(slot, {})):  # what is still open: with the hosts that said
                self._close(slot, iteration)
            skews = sorted(self.skews.get(slot, ()))

        def quantile(q: float) -> float | None:
            return skews[min(len(skews) - 1, int(q * len(skews)))] if skews else None

        return {
            "skew_p50_ms": quantile(0.5),
            "skew_p90_ms": quantile(0.9),
            "skew_max_ms": self.largest.get(slot),
            "iterations": self.iterations.get(slot, 0),
        }


@dataclass
class TurnServerProcess:
    """One host's turn server, driven through its stdin; its stdout is read by a thread."""

    host: str
    socket: str
    command: list[str]
    events: list[dict] = field(default_factory=list)
    stats: dict | None = None

    env: dict[str, str] | None = None
    on_spans: Callable[[str, list], None] | None = None  # (host, [[slot, iteration, first, last, devices], ...])
    deadline: float | None = None  # time.monotonic() by which the run must end (--timeout)
    remote_prefix: list[str] | None = None  # how ssh reaches the host (an emulated cluster's head)
    tag: str | None = None  # XOVER_TURN_SERVER in its environment: what finds it on its host if it hangs
    metrics_port: int | None = None  # where it serves its devices' figures (`metrics PORT`), if asked to
    credentials: MetricsCredentials | None = None  # what it serves them with: the first line of its stdin
    on_counts: Callable[[str, dict], None] | None = None  # (host, its answer to P: {"switch": n, "slots": ...})
    on_switched: Callable[[str, dict], None] | None = None  # (host, a `switched` event: a device switched a slot)

    def __post_init__(self) -> None:
        """Start the process (quick: its `ready`, which may take tens of seconds over ssh, is `wait_ready`'s)."""
        self.ready = False  # it said `ready`: its readers run
        self.stopped = False
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **(self.env or {})},
        )
        if self.credentials is not None:  # on its stdin: never on a command line (ssh's included)
            self.send(self.credentials.to_line())

    def wait_ready(self) -> None:
        """Wait for the server to say it is ready, at most START_TIMEOUT_S or until the run's deadline: an
        XoverError that says why (TimedOut past the deadline) if it did not, the server then killed."""
        wait_s = START_TIMEOUT_S
        if self.deadline is not None:
            wait_s = max(0.0, min(wait_s, self.deadline - time.monotonic()))
        started = time.monotonic()
        first = _readline_within(self.process, wait_s)
        if first is not None and first.startswith("metrics "):  # the port it serves its figures on, then ready
            with contextlib.suppress(ValueError, IndexError):
                self.metrics_port = int(first.split()[1])
            first = _readline_within(self.process, max(0.0, wait_s - (time.monotonic() - started)))
        if first != "ready":
            self.process.kill()
            try:
                _, error = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # something it started holds its pipes open
                error = b""
            detail = error.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            if first is None:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    raise TimedOut()
                where = "" if is_local(self.host) else f"; check that `ssh {self.host} true` answers without a prompt"
                raise XoverError(
                    f"the crossover turn server on {self.host} did not say it was ready within "
                    f"{wait_s:.0f} s ({detail[0]}){where}; then run `xover doctor`"
                )
            raise XoverError(
                f"the crossover turn server on {self.host} did not start ({detail[0]}); run `xover doctor`"
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # read, so that a chatty server never blocks on a full pipe, and kept, for a server that dies
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self.stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.stderr_reader.start()
        self.ready = True

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None  # piped
        for raw in self.process.stderr:
            self.stderr_tail.append(raw[-2000:].decode(errors="replace").rstrip())  # a line, not megabytes

    def _read(self) -> None:
        assert self.process.stdout is not None  # piped
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            kind, _, payload = line.partition(" ")
            try:
                if kind == "event":
                    event = {**json.loads(payload), "host": self.host}
                    self.events.append(event)
                    if event.get("kind") == "switched" and self.on_switched is not None:
                        self.on_switched(self.host, event)
                elif kind == "counts" and self.on_counts is not None:
                    self.on_counts(self.host, json.loads(payload))
                elif kind == "spans" and self.on_spans is not None:
                    self.on_spans(self.host, json.loads(payload))
                elif kind == "stats":
                    self.stats = json.loads(payload)
            except (json.JSONDecodeError, TypeError, ValueError):
                pass

    def send(self, command: str) -> None:
        """One command to the server on its control pipe (a server already gone is left be)."""
        assert self.process.stdin is not None  # piped
        try:
            self.process.stdin.write(command.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the server is gone: nobody is waiting on it

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the server to stop, wait for it, and collect what it said; killed if it does not stop in time.
        One that never said it was ready (its start failed, or was cut short) is killed. Once is enough."""
        if self.stopped:
            return
        self.stopped = True
        if not self.ready:
            self._kill_unready()
            return
        died = self.process.poll() is not None  # before it was asked to stop: the jobs went on without turns
        if not died:
            self.send("Q")
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:  # hung or stopped: killing its ssh does not stop it there
                self.process.kill()
                self.process.wait()
                if not is_local(self.host) and self.tag:
                    sweep(TURN_SERVER_VARIABLE, [self.tag], [self.host], self.remote_prefix or [])  # it, and its files
        self.reader.join(timeout=timeout_s)
        self.stderr_reader.join(timeout=timeout_s)
        if died:
            self.events.append(
                {
                    "kind": "server-died",
                    "host": self.host,
                    "exit_code": self.process.returncode,
                    "stderr": "\n".join(self.stderr_tail),
                }
            )
        assert self.process.stdin is not None  # piped
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self._remove_files()

    def _kill_unready(self) -> None:
        """Kill a server that never said it was ready, with whatever it started in its session (on another
        host, its ssh and what that runs here: the server there ends when its stdin does, as it would at the
        run's end). Its stdout is left to the thread that may still read it (closing it would wait for that
        read), which ends with the pipe."""
        if self.process.poll() is None:  # not reaped: its pid, the group's id, cannot be another's yet
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session (start_new_session)
        self.process.kill()
        self.process.wait()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self._remove_files()

    def _remove_files(self) -> None:
        if is_local(self.host):  # a remote server removes its own files when its stdin closes
            for path in (self.socket, self.socket + ".yield"):
                if os.path.exists(path):
                    os.unlink(path)


def _devices_by_host(placements: list[dict[str, list[int]]]) -> dict[str, dict[int, list[int]]]:
    """Each host's devices and, on each, its slots in turn order (`placements[slot]`: host -> devices)."""
    devices: dict[str, dict[int, list[int]]] = {}
    for slot, placement in enumerate(placements):
        for host, indices in placement.items():
            for index in indices:
                devices.setdefault(host_tag(host), {}).setdefault(index, []).append(slot)
    return devices


class TurnService:
    """The turn servers of one crossover group."""

    def __init__(
        self,
        name: str,
        placements: list[dict[str, list[int]]],
        policy: str,
        traits: dict[int, SlotTraits],
        remote_prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
        lease: dict[str, float] | None = None,
        nice: int | None = None,
        deadline: float | None = None,
        served: ServedTurns | None = None,
        start: bool = True,
        guard: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
        state: str = TURNS,
    ) -> None:
        """`placements[slot]` is slot's job's host -> device indices; `name` is unique per run and group;
        `deadline` (time.monotonic()), the run's --timeout: starting waits no longer (TimedOut); `served`:
        each server serves its devices' figures to Prometheus, labelled so (`endpoints`). `start`: start the
        servers now (else `start()` does); `guard`: a context in which starting one server's process and
        listing it in `servers` is not cut short (the scheduler's defers Ctrl-C and SIGTERM: a server
        started is a server `stop` stops). `state`: what the devices start in, turns or free (an adaptive
        group's; `switch` changes it)."""
        self.name = name
        self.state = state
        self._answers: dict[int, dict[str, dict[int, int]]] = {}  # switch number -> host -> slot -> iterations
        self._answered = threading.Condition()
        self.switched: queue.Queue[tuple[str, dict]] = queue.Queue()  # (host, event): for the group's controller
        self.switches = 0
        self.served = served
        self.guard = guard
        self.socket_template = os.path.join(runtime_dir(), f"{name}-{{host}}.sock")
        self.servers: list[TurnServerProcess] = []
        self.skews = GrantSkews(
            {slot: len({host_tag(host) for host, ids in where.items() if ids}) for slot, where in enumerate(placements)}
        )
        on_spans = lambda _host, spans: self.skews.add(spans)  # noqa: E731
        tag = {k: v for k, v in (env or {}).items() if k == EXPERIMENT_VARIABLE}
        tag[TURN_SERVER_VARIABLE] = name  # names one group's servers (the socket names' prefix) on every host
        credentials = served.credentials if served is not None else None
        self.planned: list[dict[str, Any]] = []  # each host's server, as TurnServerProcess takes it
        for host, order in _devices_by_host(placements).items():
            path = self.socket_template.replace("{host}", host)
            arguments = server_arguments(path, order, policy, traits, lease, nice, state)
            if served is not None:
                arguments += served.arguments(host)
            common = {
                "host": host,
                "socket": path,
                "on_spans": on_spans,
                "deadline": deadline,
                "on_counts": self._on_counts,
                "on_switched": lambda host, event: self.switched.put((host, event)),
            }
            if host == LOCAL:
                command = [sys.executable, *arguments]
                self.planned.append(
                    {
                        **common,
                        "command": command,
                        "env": {"PYTHONPATH": xover_pythonpath(), **tag},
                        "credentials": credentials,
                    }
                )
            else:
                command = command_on(
                    host,
                    [sys.executable, *arguments],
                    remote_prefix=remote_prefix or [],
                    env={"PYTHONPATH": xover_pythonpath(), **tag},
                )
                self.planned.append(
                    {
                        **common,
                        "command": command,
                        "remote_prefix": remote_prefix,
                        "tag": name,
                        "credentials": credentials,
                    }
                )
        if start:
            self.start()

    def start(self) -> None:
        """Start each host's server, then wait until each says it is ready (tens of seconds over ssh). Each is in
        `servers` from the moment its process exists, so whatever ends the start (a server that fails, the
        run's deadline, Ctrl-C or SIGTERM) stops every one started: here, or by the caller's `stop`."""
        try:
            started = []
            for planned in self.planned[len(self.servers) :]:  # all at once: each start is an ssh of its own
                with self.guard():
                    server = TurnServerProcess(**planned)
                    self.servers.append(server)
                started.append(server)
            for server in started:
                server.wait_ready()
        except BaseException:
            self.stop()
            raise

    def endpoints(self) -> list[TurnServerEndpoint]:
        """Where each host's server serves its devices' figures (none unless `served` asked for them)."""
        if self.served is None:
            return []
        return [
            TurnServerEndpoint(server.host, server.metrics_port, self.served.experiment, self.served.group)
            for server in self.servers
            if server.metrics_port is not None
        ]

    def withdraw(self, slot: int) -> None:
        """A job has ended (or never started): no partner may wait for it, even at the barrier."""
        for server in self.servers:
            server.send(f"W{slot}")

    def _on_counts(self, host: str, answer: dict) -> None:
        with self._answered:
            slots = {int(slot): int(count) for slot, count in (answer.get("slots") or {}).items()}
            self._answers.setdefault(int(answer.get("switch", 0)), {})[host] = slots
            self._answered.notify_all()

    def counts(self, timeout_s: float = SWITCH_ANSWER_S) -> tuple[int, dict[int, int]] | None:
        """Ask every host's server (`P`) for each slot's iterations so far: the number of the switch this
        prepares, and per slot the most any host has seen; None when a server that still runs did not
        answer within `timeout_s` (a switch is then not made)."""
        self.switches += 1
        number = self.switches
        live = [server for server in self.servers if server.ready and server.process.poll() is None]
        for server in live:
            server.send(f"P{number}")
        deadline = time.monotonic() + timeout_s
        with self._answered:
            while len(self._answers.get(number, {})) < len(live):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._answers.pop(number, None)
                    for server in live:  # no switch: the servers that answered hold no acquire for one
                        server.send(f"S{number} {self.state}")
                    return None
                self._answered.wait(left)
            answers = self._answers.pop(number)
        most: dict[int, int] = {}
        for slots in answers.values():
            for slot, count in slots.items():
                most[slot] = max(most.get(slot, 0), count)
        return number, most

    def switch(self, number: int, state: str, boundaries: dict[int, int]) -> None:
        """Switch `number` (from `counts`): every host's devices run each slot of `boundaries` in `state` (turns
        or free) from that slot's iteration there on; a slot not named, and one that joins, starts in it."""
        self.state = state
        text = ",".join(f"{slot}={iteration}" for slot, iteration in sorted(boundaries.items()))
        for server in self.servers:
            server.send(f"S{number} {state} {text}".rstrip())

    def stop(self) -> None:
        """Stop every host's server (once each, however often this is called)."""
        for server in self.servers:
            server.stop()

    @property
    def events(self) -> list[dict]:
        """What every host's server saw happen (revocations, refusals, dropped and released slots)."""
        return [event for server in self.servers for event in server.events]

    def slot_statistics(self) -> dict[str, dict]:
        """Per slot over every host: grants, yields, revocations, and the skew between the first grants
        of one iteration on all of the job's devices (how far apart its ranks got their turns)."""
        merged: dict[str, dict] = {}
        for server in self.servers:
            for slot, entry in ((server.stats or {}).get("slots") or {}).items():
                into = merged.setdefault(slot, {"grants": 0, "yields": 0, "revoked": 0})
                for key in ("grants", "yields", "revoked"):
                    into[key] += entry.get(key, 0)
                # the iterations not streamed yet (the last few)
                self.skews.add([[slot, *span] for span in entry.get("grant_spans", [])])
        return {slot: {**entry, **self.skews.summary(int(slot))} for slot, entry in merged.items()}
