"""The turn server: one process per host and crossover group, started by the launcher.

It keeps a `DeviceTurns` per device of its host and lets a `TurnPolicy` (policies.py) decide who
holds each device. Workers talk to it over a Unix socket (protocol.py); a waiting worker is blocked
in recv(), so waiting costs no CPU. A worker that dies closes its socket: its job's slot is dropped
on every device at once (synchronous SGD: the job cannot finish an all-reduce any more), so partners
never stall. A turn held far longer than its job usually holds it is taken back (a lease), sooner where
holders wait on each other's devices in a ring (a deadlock), and the event is reported. A worker waiting
for its turn gets a keep-alive byte every HEARTBEAT_S, so that it can tell a long wait from a dead server.
Each worker's connection may be given a send buffer of its own size (`--send-buffer`,
XOVER_TURN_SEND_BUFFER): the keep-alives a stopped worker's socket takes before it
is full, after which that worker's job loses its slot on every device here and its other ranks' connections
are closed (they train on without turns, and say so). Run as
`python -m xover.turns.server --socket PATH --device D=SLOT,...`.

An adaptive group's server also runs its devices without turns (the *free* state): a slot in it is granted
at once whenever it asks, never waited for and never asked to yield, and the policy passes it over. The
launcher switches a group between the two states at one iteration of each job on every device of every
host (`P` for each slot's iterations here, then `S` with the iteration each slot switches at; protocol.py):
a device applies a slot's switch at that slot's acquire of that iteration, and says so (a `switched` event).
Between P and S an acquire past what P counted waits for S (at most FENCE_S), so a command that is slow on
its way cannot let one device run past the iteration it names while another switches there.
A slot still taking turns waits only for a holder that takes turns too, which releases at the end of its
phase, so a switch strands no rank.

Its folder (the socket's) must be this user's own, a real folder (not a link), and is made 0700 before
anything is created in it; on another host too, where the launcher's ssh starts it. The yield page is
created anew (O_EXCL, O_NOFOLLOW, mode 0600): a name that someone put there is never followed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import mmap
import os
import select
import selectors
import signal
import socket
import stat
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NoReturn

from ..errors import XoverError
from ..settings import parse_port_range
from .credentials import MetricsCredentials
from .metrics import TurnMetrics, parse_labels, parse_names
from .policies import DEFAULT_POLICY, POLICIES, DeviceTurns, SlotTraits, TurnPolicy, make_policy
from .protocol import (
    ACQUIRE,
    BYE,
    FREE,
    GRANT,
    HEARTBEAT,
    HEARTBEAT_S,
    HELLO,
    MAX_SLOTS,
    RELEASE,
    STEP_IN,
    STEP_OUT,
    TURNS,
    YIELD,
    YIELD_PAGE_BYTES,
    counts_line,
    event_line,
    spans_line,
    stats_line,
    yield_page_path,
)

# Every handoff (a release, a yield) waits for this process to be scheduled, and on a CPU every core
# is busy with the jobs' workers; ahead of them, a turn changes hands without waiting for a time slice
# (docs/measurements.md, Figures behind the design: *The turn server's priority*). `--nice`
# (XOVER_TURN_SERVER_NICE for xover run) overrides it.
SERVER_NICE = -15
MAX_PENDING_BYTES = 4096  # of a message still in flight (a hello is a few bytes): past this, the client goes
# Sends never block (one client that reads nothing must not stall every device's grants). A client
# whose socket takes nothing (full of keep-alives it has not read) loses its slot at once; the part of
# a message its socket could not take waits in the client's own queue, which may hold at most
# MAX_QUEUED_BYTES and must drain within WRITE_GRACE_S, or the client loses its slot.
MAX_QUEUED_BYTES = 64
WRITE_GRACE_S = 5.0
FENCE_S = 5.0  # the longest an acquire past P's counts waits for its S (the launcher gives P 2 s to be answered)
MAX_WAIT_S = 86400.0  # select() refuses timeouts past ~24 days; a lease is capped at a day (XOVER_TURN_LEASE)
SPAN_LAG = 8  # a slot's iteration this far behind its newest on this host has had its first grant on every device
SPANS_PER_LINE = 256  # finished iterations' first grants, streamed to the launcher in lines of this many


class FolderError(Exception):
    """The server's folder is not one this user can trust."""


def private_folder(path: str) -> str:
    """`path` as a folder only this user can use: created 0700 if missing (with its parents); else it
    must be a real folder (not a link) of this user's, and is made 0700. Another user's folder, or a
    link in its place, is a FolderError that says what to do."""
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise FolderError(
            f"cannot create the folder {path} for xover's sockets: {error.strerror}; "
            "set XDG_RUNTIME_DIR to a folder of your own"
        ) from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise FolderError(
            f"{path}, the folder for xover's sockets, is {'a link' if stat.S_ISLNK(info.st_mode) else 'not a folder'}: "
            "someone else may have made it; remove it, or set XDG_RUNTIME_DIR to a folder of your own"
        )
    if info.st_uid != os.geteuid():
        raise FolderError(
            f"{path}, the folder for xover's sockets, belongs to uid {info.st_uid}, not to you: "
            "remove it, or set XDG_RUNTIME_DIR to a folder of your own"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)  # before anything is made in it: nobody else may add or swap a name there
    return path


def create_page(path: str) -> BinaryIO:
    """The yield page, a new file of mode 0600 (a name already there is removed first, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "w+b")


def raise_priority(nice: int) -> None:
    """Run the server at `nice` if allowed (root or CAP_SYS_NICE); otherwise it keeps its priority."""
    if nice < os.getpriority(os.PRIO_PROCESS, 0):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:
            pass


@dataclass
class Lease:
    """How long a holder may keep a turn: `factor` x its usual hold, at least `floor_s`; before a slot
    has a history (start-up, first iterations) only `initial_s` applies. A holder in a ring of holders
    that wait on each other's devices gets at most `floor_s` or twice its longest hold, history or not (and is
    asked to yield half-way: TurnServer._ask_ring_holders_to_yield)."""

    floor_s: float = 30.0
    factor: float = 20.0
    initial_s: float = 600.0

    def limit(self, holds: list[float], in_a_ring: bool = False) -> float:
        """The longest a holder with these past holds may keep a turn before it is taken back."""
        usual = self.initial_s if len(holds) < 3 else max(self.floor_s, self.factor * statistics.median(holds))
        if not in_a_ring:
            return usual
        # a ring is a deadlock once a holder is blocked in a collective with its own rank that waits (a script's
        # collective inside the turn): nothing in it will release, and no history is needed to see it; a holder
        # that only computes in a ring (devices that granted in another order) yields when asked half-way
        return min(usual, max(self.floor_s, 2.0 * max(holds, default=0.0)))


@dataclass
class SlotRecord:
    """Per slot on this host: iteration -> first grant time on each device (for rank skew), counts."""

    grants: int = 0
    free_grants: int = 0  # of them, without turns (an adaptive group's free state)
    yields: int = 0
    revoked: int = 0
    first_grants: dict[int, dict[int, float]] = field(default_factory=dict)  # iteration -> device -> wall time
    streamed_below: int = 0  # iterations below this were sent to the launcher (and forgotten here)
    holds: deque[float] = field(default_factory=lambda: deque(maxlen=50))


@dataclass(eq=False)
class Client:
    """One worker's connection: who it is, what it sent that is not read yet, what its socket could not take."""

    sock: socket.socket
    member: tuple[int, int] | None = None  # (device, slot), once it said hello (None again after its bye)
    received: bytes = b""  # the start of a message still in flight
    outbox: bytearray | None = None  # what its socket could not take yet
    stuck_since: float = 0.0  # when its outbox last had to start holding bytes (with an outbox)
    asking: bool = False  # asked for a turn, not granted yet: keep-alives go to it
    gone: bool = False  # dropped: closed, and out of every table


class TurnServer:
    """One host's turns: the devices of a group here, the workers' connections, the policy's decisions."""

    def __init__(
        self,
        path: str,
        devices: dict[int, list[int]],
        policy: TurnPolicy,
        join_timeout_s: float = 300.0,
        lease: Lease | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        send_buffer: int | None = None,
        metrics: TurnMetrics | None = None,
        state: str = TURNS,
    ) -> None:
        self.path = path
        self.metrics = metrics  # served to Prometheus (metrics.py) when the launcher asked for it
        self.heartbeat_s = heartbeat_s
        self.send_buffer = send_buffer  # SO_SNDBUF of each worker's connection; None: the kernel's default
        self.policy = policy
        self.lease = lease or Lease()
        self.devices = {d: DeviceTurns(order=list(slots)) for d, slots in devices.items()}
        self.join_deadline = time.monotonic() + join_timeout_s
        self.selector = selectors.DefaultSelector()
        if os.path.lexists(path):
            os.unlink(path)
        self.page_file = create_page(yield_page_path(path))
        self.page_file.truncate(YIELD_PAGE_BYTES)
        self.page = mmap.mmap(self.page_file.fileno(), YIELD_PAGE_BYTES)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(256)
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self.clients: dict[socket.socket, Client] = {}  # every worker's connection
        self.by_member: dict[tuple[int, int], Client] = {}  # (device, slot) -> its connection
        self.iteration: dict[tuple[int, int], int] = {}  # (device, slot) -> compute phases asked for
        self.next_heartbeat = time.monotonic() + heartbeat_s
        self.records: dict[int, SlotRecord] = {}
        self.spans_out: list[list[Any]] = []  # [slot, iteration, first, last, devices] not yet sent
        self.running = True
        self.control_buffer = b""
        # an adaptive group's state: TURNS or FREE, the last one the launcher switched to (a slot's first
        # acquire on a device starts in it); each (device, slot)'s own; the switches still to come, at the
        # slot's acquire of that iteration: (device, slot) -> (iteration, state, the switch's number)
        self.state = state
        self.modes: dict[tuple[int, int], str] = {}
        self.pending: dict[tuple[int, int], tuple[int, str, int]] = {}
        # between P and its S: per slot, the most iterations asked for here when P came. The launcher's switch
        # comes after that on every host, so an acquire past it waits (held) until S says where the switch
        # is: no device can run past its switch before it is told, however late S comes (up to FENCE_S).
        self.fence: dict[int, int] | None = None
        self.fence_until = 0.0
        self.held: list[Client] = []

    # -- main loop ----------------------------------------------------------------------------
    def watch_stdin(self) -> None:
        """Launcher commands arrive on stdin; its end (the launcher or its ssh is gone) stops us."""
        # only its descriptor is read (os.read in _on_control), so the buffered stream serves as well as its raw one
        self.selector.register(sys.stdin.buffer, selectors.EVENT_READ, "control")

    def serve(self) -> None:
        """Answer workers and the controller until told to stop: requests, releases, keep-alives, leases."""
        while self.running:
            for key, events in self.selector.select(self._timeout()):
                if key.data == "listen":
                    conn, _ = self.listener.accept()
                    conn.setblocking(False)
                    if self.send_buffer is not None:
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                    client = self.clients[conn] = Client(conn)
                    self.selector.register(conn, selectors.EVENT_READ, client)
                elif key.data == "control":
                    self._on_control(key.fileobj)
                else:
                    client = key.data
                    if events & selectors.EVENT_WRITE and client.outbox is not None and not client.gone:
                        self._flush(client)
                    if events & selectors.EVENT_READ and not client.gone:
                        self._on_readable(client)
            now = time.monotonic()
            self._drop_unwritable(now)
            if now >= self.join_deadline:
                self._close_barrier_on_latecomers()
            self._enforce_leases(now)
            if self.fence is not None and now >= self.fence_until:
                self._lift_fence()  # the launcher never said where: the held go on (a switch then comes late)
            if now >= self.next_heartbeat:
                self._heartbeat()
                self.next_heartbeat = now + self.heartbeat_s

    def _timeout(self) -> float | None:
        now = time.monotonic()
        deadlines = []
        if not all(d.open for d in self.devices.values()):
            deadlines.append(self.join_deadline)
        ring = self.holders_in_a_ring()
        for turns in self.devices.values():
            if turns.holder is not None:
                limit = self._lease_limit(turns.holder, ring)
                deadlines.append(turns.holder_since + limit)
                if turns.holder in ring and now - turns.holder_since <= limit / 2:
                    deadlines.append(turns.holder_since + limit / 2)  # when it is asked to yield
        if any(client.asking for client in self.clients.values()):
            deadlines.append(self.next_heartbeat)
        stuck = [client.stuck_since for client in self.clients.values() if client.outbox is not None]
        if stuck:
            deadlines.append(min(stuck) + WRITE_GRACE_S)
        if self.fence is not None:
            deadlines.append(self.fence_until)
        return min(MAX_WAIT_S, max(0.0, min(deadlines) - now)) if deadlines else None

    # -- workers ------------------------------------------------------------------------------
    def _on_readable(self, client: Client) -> None:
        try:
            data = client.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        buffer = client.received + data
        while buffer and not client.gone:  # (a grant it could not be sent drops it on the way)
            command = buffer[:1]
            if command == HELLO:
                end = buffer.find(b"\n")
                if end < 0:
                    break  # the rest of the line is still in flight
                hello = _parse_hello(buffer[1:end])
                if hello is None:
                    self._refuse(client, buffer[: min(end, 64)])
                    return
                buffer = buffer[end + 1 :]
                if not self._join(client, *hello):
                    return
                continue
            buffer = buffer[1:]
            member = client.member
            if member is None:
                continue
            device, slot = member
            turns, now = self.devices[device], time.monotonic()
            if command in (ACQUIRE, YIELD, STEP_IN):
                client.asking = True
            if command == ACQUIRE:
                fence = self.fence  # (a slot P did not count, one that joined since, is never held)
                if fence is not None and slot in fence and self.iteration.get(member, 0) >= fence[slot]:
                    self.held.append(client)  # past what P counted: its acquire waits for the switch P announced
                else:
                    self._acquire(client, member, now)
            elif command in (YIELD, STEP_IN) and slot in turns.free:  # never asked to: granted as it asks
                self._grant_free(client, device, slot)
            elif command == YIELD:
                held = turns.release(slot, now)
                if held is not None:
                    self._record(slot).yields += 1
                    self._record(slot).holds.append(held)
                self._clear_yield(device)
                turns.request(slot, now, new_iteration=False)
            elif command == STEP_OUT:  # mid-phase, no new iteration; strict round robin keeps its place
                held = turns.release(slot, now)
                if held is not None:
                    self._record(slot).holds.append(held)
                self._clear_yield(device)
            elif command == STEP_IN:
                turns.request(slot, now, new_iteration=False)
            elif command == RELEASE:
                held = turns.release(slot, now, end_of_phase=True)
                if held is not None:
                    self._record(slot).holds.append(held)
                    self.policy.on_pass(turns)
                self._clear_yield(device)
            elif command == BYE:
                self._leave(member)
                client.member = None
                self.by_member.pop(member, None)
            self._decide(device)
        if client.gone:
            return  # dropped on the way (a grant it could not be sent)
        if len(buffer) > MAX_PENDING_BYTES:  # a hello that never ends
            self._refuse(client, buffer[:64])
            return
        client.received = buffer

    def _refuse(self, client: Client, start: bytes) -> None:
        """A message that is not the protocol's (a same-user client's bug): that client goes, not the server."""
        print(
            event_line(
                json.dumps(
                    {"kind": "refused", "reason": "malformed", "message": start.decode("ascii", errors="replace")}
                )
            ),
            flush=True,
        )
        self._drop(client)

    def _join(self, client: Client, device: int, slot: int) -> bool:
        if not (0 <= device < YIELD_PAGE_BYTES and 0 <= slot < MAX_SLOTS) or (device, slot) in self.by_member:
            # a second registration of one (device, slot) would deadlock both: refuse it
            print(
                event_line(
                    json.dumps(
                        {
                            "kind": "refused",
                            "device": device,
                            "slot": slot,
                            "reason": "duplicate" if (device, slot) in self.by_member else "range",
                        }
                    )
                ),
                flush=True,
            )
            self._drop(client, withdraw=False)
            return False
        turns = self.devices.setdefault(device, DeviceTurns(order=[slot]))
        if slot not in turns.order:  # not announced at start: joins at the end of the order
            turns.order.append(slot)
        client.member = (device, slot)
        self.by_member[(device, slot)] = client
        turns.gone.discard(slot)
        return True

    def _leave(self, member: tuple[int, int]) -> None:
        device, slot = member
        turns = self.devices[device]
        was_holder = turns.holder == slot
        turns.leave(slot, time.monotonic())
        if was_holder:
            self.policy.on_pass(turns)
            self._clear_yield(device)

    def withdraw(self, slot: int) -> None:
        """A job has ended (or never started): take it out of every device's turns, so no partner waits for it."""
        for device, turns in self.devices.items():
            if slot in turns.order and slot not in turns.gone:
                self._leave((device, slot))
                self._decide(device)

    # -- sending: never blocking, one queue per client ---------------------------------------
    def _send(self, client: Client, data: bytes) -> bool:
        """Send `data` to a client without blocking; the part its socket cannot take now is queued. False
        when the client is gone or cannot be written to (then it has been dropped: its slot is lost).
        A socket that takes nothing is full of keep-alives its client has not read (hundreds of them: a
        waiting worker reads each as it comes): that client is stopped or hung, and the grant goes to
        the next one now, not after a grace that every partner would wait out."""
        queued = client.outbox
        if queued is None:
            try:
                sent = client.sock.send(data)
            except BlockingIOError:
                self._unwritable(client, "its socket is full of messages it has not read")
                return False
            except OSError:
                self._drop(client)
                return False
            if sent == len(data):
                return True
            queued = client.outbox = bytearray()
            client.stuck_since = time.monotonic()
            self.selector.modify(client.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, client)
            data = data[sent:]
        queued += data
        if len(queued) > MAX_QUEUED_BYTES:
            self._unwritable(client, "its queue is full")
            return False
        return True

    def _flush(self, client: Client) -> None:
        queued = client.outbox
        assert queued is not None  # (the selector asks for writes only while there is an outbox)
        try:
            sent = client.sock.send(queued)
        except BlockingIOError:
            return
        except OSError:
            self._drop(client)
            return
        del queued[:sent]
        if not queued:
            client.outbox = None
            self.selector.modify(client.sock, selectors.EVENT_READ, client)
        else:
            client.stuck_since = time.monotonic()  # it reads: the grace starts again

    def _drop_unwritable(self, now: float) -> None:
        for client in list(self.clients.values()):
            if not client.gone and client.outbox is not None and now - client.stuck_since > WRITE_GRACE_S:
                self._unwritable(client, f"it read nothing for {WRITE_GRACE_S:.0f} s")

    def _unwritable(self, client: Client, why: str) -> None:
        """A client that does not read (stopped, suspended, hung) loses its slot, as a dead one does, and
        its job's other ranks here are let go (their connections closed: they train on without turns);
        the other jobs and devices go on."""
        member = client.member
        print(
            event_line(
                json.dumps(
                    {
                        "kind": "unwritable",
                        "device": member[0] if member else None,
                        "slot": member[1] if member else None,
                        "reason": why,
                        "queued": len(client.outbox or b""),
                        "wall_time": time.time(),
                    }
                )
            ),
            flush=True,
        )
        # Its job gives up its turns on every device here, and each of its other ranks is told so: its
        # connection is closed, and that worker trains on without turns and says so (a turns-lost record)
        # when it next asks. Withdrawing the slot everywhere without telling them erased a waiting rank's
        # request while its keep-alives went on: it waited for ever. Dropping the stopped rank's device
        # only left the job's rank on another device its turns: under round robin, that device's partner
        # then waited for a rank that sat in its all-reduce with the stopped one, asking for nothing
        # (bench/chaos.py stop-waiter found both).
        self._drop(client)
        if member is not None:
            for other_member, other in list(self.by_member.items()):
                if other_member[1] == member[1]:
                    print(
                        event_line(
                            json.dumps(
                                {
                                    "kind": "released",
                                    "device": other_member[0],
                                    "slot": member[1],
                                    "reason": f"its job's rank on device {member[0]} cannot be written to",
                                    "wall_time": time.time(),
                                }
                            )
                        ),
                        flush=True,
                    )
                    self._drop(other, withdraw=False)

    def _drop(self, client: Client, withdraw: bool = True) -> None:
        if client.gone:
            return  # dropped already (a send that failed on the way)
        client.gone, client.asking, client.outbox = True, False, None
        member, client.member = client.member, None
        del self.clients[client.sock]
        self.selector.unregister(client.sock)
        client.sock.close()
        if member is not None:
            self.by_member.pop(member, None)
            if self.metrics is not None:
                self.metrics.lost_by(*member)
            if withdraw:
                # Died without saying bye: its job cannot finish an all-reduce now, so its turns are
                # dropped on every device at once rather than when its other ranks are reaped.
                self.withdraw(member[1])

    # -- decisions ----------------------------------------------------------------------------
    def _decide(self, device: int) -> None:
        turns = self.devices[device]
        now = time.monotonic()
        while True:
            choice = self.policy.choose(turns, now)
            if choice is None:
                break
            slot, unpreemptible = choice
            client = self.by_member.get((device, slot))
            if client is None:  # asked, then left
                turns.waiting.pop(slot, None)
                continue
            asked_at = turns.waiting[slot].since
            turns.grant(slot, now, unpreemptible)
            if self.metrics is not None:
                self.metrics.granted(device, slot, now - asked_at)
            self._note_grant(device, slot)
            client.asking = False
            if not self._send(client, GRANT):
                continue  # gone, or cannot be written to: dropped, its slot withdrawn; the next one
            break
        if self.policy.preemptive and turns.holder is not None and self.policy.wants_yield(turns, now):
            self.page[device] = turns.holder + 1
        elif self.page[device]:
            self._clear_yield(device)
        if self.metrics is not None:
            self.metrics.decided(device, turns.holder, now)

    def _clear_yield(self, device: int) -> None:
        self.page[device] = 0

    # -- an adaptive group: turns, or none --------------------------------------------------------
    def _mode_at(self, member: tuple[int, int], now: float) -> str:
        """The state `member` (device, slot) computes its new iteration in: a switch due at this iteration (or
        an earlier one, when its command came late) applies now, and is said (a `switched` event)."""
        device, slot = member
        mode = self.modes.get(member, self.state)
        due = self.pending.get(member)
        iteration = self.iteration.get(member, 0)
        if due is not None and iteration >= due[0]:
            del self.pending[member]
            boundary, mode, number = due
            print(
                event_line(
                    json.dumps(
                        {
                            "kind": "switched",
                            "device": device,
                            "slot": slot,
                            "state": mode,
                            "switch": number,
                            "iteration": iteration,
                            "boundary": boundary,
                            "wall_time": time.time(),
                        }
                    )
                ),
                flush=True,
            )
        self.modes[member] = mode
        turns = self.devices[device]
        if mode == FREE and slot not in turns.free:
            turns.free.add(slot)
            turns.waiting.pop(slot, None)  # (it asks now: it was not waiting)
            history = turns.slot_history(slot)  # what the policy learns resumes when it takes turns again
            history.released_at = None
            history.starts.clear()
            if turns.holder == slot:  # (it released its last phase; a script that did not gives it up now)
                turns.release(slot, now)
                self.policy.on_pass(turns)
            if self.metrics is not None:
                self.metrics.without_turns(device, slot, True)
        elif mode == TURNS and slot in turns.free:
            turns.free.discard(slot)
            if self.metrics is not None:
                self.metrics.without_turns(device, slot, False)
        return mode

    def _acquire(self, client: Client, member: tuple[int, int], now: float) -> None:
        """`member` asks for its next iteration's compute: in the state it runs that iteration in."""
        device, slot = member
        self.iteration[member] = self.iteration.get(member, 0) + 1
        if self._mode_at(member, now) == FREE:
            self._grant_free(client, device, slot)
        else:
            self.devices[device].request(slot, now, new_iteration=True)

    def _lift_fence(self) -> None:
        """The switch P announced came (or never will): the acquires it held go on, in their order."""
        self.fence = None
        held, self.held = self.held, []
        now = time.monotonic()
        for client in held:
            member = client.member
            if member is not None and not client.gone:
                self._acquire(client, member, now)
                self._decide(member[0])

    def _grant_free(self, client: Client, device: int, slot: int) -> None:
        """A slot without turns asked: granted at once (`_decide` then serves the slots that take turns)."""
        client.asking = False
        record = self._record(slot)
        record.free_grants += 1
        self._note_grant(device, slot)
        self._send(client, GRANT)

    def counts(self) -> dict[int, int]:
        """Per slot on this host: the most iterations it has asked for on any of its devices here."""
        slots: dict[int, int] = {slot: 0 for turns in self.devices.values() for slot in turns.order}
        for (_, slot), iteration in self.iteration.items():
            slots[slot] = max(slots.get(slot, 0), iteration)
        return slots

    def switch(self, number: int, state: str, boundaries: dict[int, int]) -> None:
        """The launcher's switch `number` to `state`: each slot at its iteration `boundaries[slot]` on every
        device here (its acquire of that iteration runs in the new state); a slot not named, and one that
        joins later, starts in it."""
        self.state = state
        for device, turns in self.devices.items():
            for slot in turns.order:
                if slot in boundaries:
                    self.pending[(device, slot)] = (boundaries[slot], state, number)

    def _heartbeat(self) -> None:
        """A byte to every worker still waiting for its turn: the server is alive, the wait goes on."""
        for client in [client for client in self.clients.values() if client.asking]:
            if client.outbox is not None:
                continue  # it has not read what it was sent: a keep-alive adds nothing
            try:
                client.sock.send(HEARTBEAT)
            except BlockingIOError:
                pass  # its buffer is full of keep-alives it has not read: it knows we are alive
            except OSError:
                client.asking = False  # gone: its hang-up is read next

    def _close_barrier_on_latecomers(self) -> None:
        # A slot that never became ready (its job is stuck starting) must not hold the others back.
        for device, turns in self.devices.items():
            if not turns.open:
                turns.gone |= set(turns.order) - turns.ready
                turns.open = True
                self._decide(device)

    # -- leases and statistics ----------------------------------------------------------------
    def _record(self, slot: int) -> SlotRecord:
        return self.records.setdefault(slot, SlotRecord())

    def _note_grant(self, device: int, slot: int) -> None:
        record = self._record(slot)
        record.grants += 1
        iteration = self.iteration.get((device, slot), 0)
        if iteration < record.streamed_below:
            return  # a rank far behind its others: its iteration's span was sent already
        record.first_grants.setdefault(iteration, {}).setdefault(device, time.time())
        # Iterations well behind the newest are over on every device of this host (synchronous SGD keeps
        # a job's ranks within an iteration or so): they go to the launcher and are forgotten here, so
        # that memory and the final statistics line stay the same size however long the run.
        below = iteration - SPAN_LAG
        if below > record.streamed_below:
            for done in sorted(i for i in record.first_grants if i < below):
                times = record.first_grants.pop(done)
                self.spans_out.append([slot, done, min(times.values()), max(times.values()), len(times)])
            record.streamed_below = below
            if len(self.spans_out) >= SPANS_PER_LINE:
                self.flush_spans()

    def flush_spans(self) -> None:
        """Print the spans of first grants settled since the last flush (per slot and iteration: earliest and
        latest over this host's devices) on stdout, for the service that started this server."""
        if not self.spans_out:
            return
        try:
            print(spans_line(json.dumps(self.spans_out, separators=(",", ":"))), flush=True)
        except (BrokenPipeError, OSError):
            pass  # the launcher is gone: we are about to be stopped
        self.spans_out = []

    def _lease_limit(self, slot: int, ring: set[int]) -> float:
        return self.lease.limit(list(self._record(slot).holds), in_a_ring=slot in ring)

    def holders_in_a_ring(self) -> set[int]:
        """The slots that hold a device here and wait for another, where the holders of what they wait for
        wait in turn, device by device, for a device that they hold: each one's holding rank may sit in a
        collective beside its own waiting rank, and then none of them ever releases."""
        holders = {turns.holder for turns in self.devices.values() if turns.holder is not None}
        if not any(slot in holders for turns in self.devices.values() for slot in turns.waiting):
            return set()  # no holder waits for another device: no ring (the common case, checked on every loop)
        waits_for: dict[int, set[int]] = {}
        for turns in self.devices.values():
            if turns.holder is not None:
                for slot in turns.waiting:
                    waits_for.setdefault(slot, set()).add(turns.holder)
        ring = set()
        for start in waits_for:
            seen: set[int] = set()
            reach = list(waits_for[start])
            while reach:
                slot = reach.pop()
                if slot == start:
                    ring.add(start)
                    break
                if slot not in seen:
                    seen.add(slot)
                    reach.extend(waits_for.get(slot, ()))
        return ring

    def _ask_ring_holders_to_yield(self, ring: set[int], now: float) -> None:
        """A ring holder half-way to its ring lease is asked to yield on the page: one that computes gives the turn
        up at its next layer boundary and its partner takes it, which opens the ring (devices that only granted in
        another order); one that sits in a collective cannot, and loses the turn at its lease. Asked again on every
        pass: a decision on the device in between clears the page."""
        for device, turns in self.devices.items():
            slot = turns.holder
            if slot in ring and now - turns.holder_since > self._lease_limit(slot, ring) / 2:
                self.page[device] = slot + 1

    def _enforce_leases(self, now: float) -> None:
        ring = self.holders_in_a_ring()
        self._ask_ring_holders_to_yield(ring, now)
        for device, turns in self.devices.items():
            slot = turns.holder
            if slot is None or now - turns.holder_since <= self._lease_limit(slot, ring):
                continue
            held = now - turns.holder_since
            # the ring's lease, shorter than the usual one, ended this hold: a holder asked to yield that did not
            in_a_ring = slot in ring and self._lease_limit(slot, ring) < self._lease_limit(slot, set())
            turns.release(slot, now)
            # out of the rotation until it asks again (`request` brings it back): strict round robin
            # would otherwise come back to it after one turn of each partner and wait for it forever
            turns.gone.add(slot)
            self.policy.on_pass(turns)
            self._clear_yield(device)
            self._record(slot).revoked += 1
            if self.metrics is not None:
                self.metrics.revoked_from(device, slot)
            print(
                event_line(
                    json.dumps(
                        {
                            "kind": "lease-revoked",
                            "device": device,
                            "slot": slot,
                            "held_s": round(held, 3),
                            "in_a_ring": in_a_ring,
                            "wall_time": time.time(),
                        }
                    )
                ),
                flush=True,
            )
            self._decide(device)
            # and on its job's other devices, where a rank that neither holds nor asks sits in its all-reduce
            # with the hung one: passed over until it asks again, or round robin keeps its partner waiting
            # there for as long as the hang lasts (a rank that asks or holds keeps its place)
            for other_device, other in self.devices.items():
                if (
                    slot in other.order
                    and slot not in other.gone
                    and other.holder != slot
                    and slot not in other.waiting
                ):
                    other.gone.add(slot)
                    self._decide(other_device)
            ring = self.holders_in_a_ring()  # one holder taken back opens its ring: the others keep their lease

    def statistics(self) -> dict[str, Any]:
        """The policy and each slot's grants, yields, revocations and first-grant spans, for the run's record."""
        slots = {}
        for slot, record in sorted(self.records.items()):
            slots[str(slot)] = {
                "grants": record.grants,
                "free_grants": record.free_grants,
                "yields": record.yields,
                "revoked": record.revoked,
                # per iteration: earliest and latest first grant over this host's devices of the slot
                "grant_spans": [
                    [iteration, min(t.values()), max(t.values()), len(t)]
                    for iteration, t in sorted(record.first_grants.items())
                    if t
                ],
            }
        return {"policy": self.policy.name, "slots": slots}

    # -- launcher commands --------------------------------------------------------------------
    def _on_control(self, stream: Any) -> None:  # the selector's file object: stdin's buffer
        data = os.read(stream.fileno(), 4096)
        if not data:
            self.running = False
            return
        self.control_buffer += data
        while b"\n" in self.control_buffer:
            line, self.control_buffer = self.control_buffer.split(b"\n", 1)
            if line.startswith(b"W") and line[1:].strip().isdigit():
                self.withdraw(int(line[1:]))
            elif line.startswith(b"P") and line[1:].strip().isdigit():
                counts = self.counts()
                self.fence, self.fence_until = counts, time.monotonic() + FENCE_S
                payload = {"switch": int(line[1:]), "slots": {str(k): v for k, v in counts.items()}}
                try:
                    print(counts_line(json.dumps(payload, separators=(",", ":"))), flush=True)
                except (BrokenPipeError, OSError):
                    pass  # the launcher is gone: we are about to be stopped
            elif line.startswith(b"S"):
                parsed = _parse_switch(line[1:])
                if parsed is not None:
                    self.switch(*parsed)
                    self._lift_fence()
            elif line.startswith(b"Q"):
                self.running = False

    def close(self) -> None:
        """Close every connection and the listening socket."""
        for conn in list(self.clients):
            conn.close()
        self.listener.close()
        self.page.close()
        self.page_file.close()
        for path in (self.path, yield_page_path(self.path)):
            # whoever made the folder may remove it first (a launcher cleaning up as the server stops)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _parse_switch(text: bytes) -> tuple[int, str, dict[int, int]] | None:
    """b'<number> <state> <slot>=<iteration>,...' (protocol.py), or None for anything else."""
    fields = text.decode("ascii", errors="replace").split()
    if len(fields) not in (2, 3) or not fields[0].isdigit() or fields[1] not in (TURNS, FREE):
        return None
    boundaries = {}
    for item in fields[2].split(",") if len(fields) == 3 else []:
        slot, _, iteration = item.partition("=")
        if not (slot.isdigit() and iteration.isdigit()):
            return None
        boundaries[int(slot)] = int(iteration)
    return int(fields[0]), fields[1], boundaries


def _parse_hello(text: bytes) -> tuple[int, int] | None:
    """b'<device> <slot>' as two integers, or None."""
    fields = text.split()
    if len(fields) != 2 or not all(field.isdigit() and len(field) <= 6 for field in fields):
        return None
    return int(fields[0]), int(fields[1])


def _die_with_parent() -> None:
    # If the launcher is killed (even SIGKILL), the server goes too and removes its socket.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def parse_devices(specs: list[str]) -> dict[int, list[int]]:
    """'0=0,1' -> {0: [0, 1]}: device 0 hosts slots 0 then 1."""
    devices: dict[int, list[int]] = {}
    for spec in specs:
        device, slots = spec.split("=")
        devices[int(device)] = [int(s) for s in slots.split(",") if s]
    return devices


def parse_traits(specs: list[str]) -> dict[int, SlotTraits]:
    """'1:rank=0.2,max_slowdown=1.5,solo_s=0.13' -> {1: SlotTraits(0.2, 1.5, 0.13)}."""
    traits = {}
    for spec in specs:
        slot, _, fields = spec.partition(":")
        values = dict(item.split("=") for item in fields.split(",") if item)
        traits[int(slot)] = SlotTraits(
            rank=float(values["rank"]) if "rank" in values else None,
            max_slowdown=float(values["max_slowdown"]) if "max_slowdown" in values else None,
            solo_iteration_s=float(values["solo_s"]) if "solo_s" in values else None,
        )
    return traits


CREDENTIALS_WAIT_S = 30.0  # for the launcher's first line (it writes it as soon as the server starts)
MAX_CREDENTIALS_BYTES = 65536


def _credentials_from_stdin() -> MetricsCredentials:
    """The metrics' credentials, the first line of stdin, read a byte at a time: what follows (the launcher's
    commands) stays in the pipe for the control loop. OSError if none came whole in time."""
    line = bytearray()
    deadline = time.monotonic() + CREDENTIALS_WAIT_S
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or len(line) > MAX_CREDENTIALS_BYTES or not select.select([0], [], [], left)[0]:
            raise OSError("no credentials on stdin")
        byte = os.read(0, 1)
        if not byte:
            raise OSError("stdin ended before the credentials")
        line += byte
    try:
        return MetricsCredentials.from_line(line.decode())
    except (UnicodeDecodeError, ValueError):
        raise OSError("the credentials on stdin are malformed") from None


def _exit_with(message: str) -> NoReturn:
    print(f"xover turn server: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _command_line() -> argparse.ArgumentParser:
    """The server's options, as the launcher gives them (turns/service.py); `ServerOptions.parse` reads them."""
    parser = argparse.ArgumentParser(description="xover turn server (one per host and group)")
    option = parser.add_argument
    option("--socket", required=True)
    option("--device", action="append", default=[], help="DEVICE=SLOT,SLOT,... in turn order")
    option("--policy", default=DEFAULT_POLICY)
    option("--slot", action="append", default=[], help="SLOT:rank=R,max_slowdown=S,solo_s=T")
    option("--join-timeout", type=float, default=300.0)
    option("--lease-floor", type=float, default=Lease.floor_s)
    option("--lease-factor", type=float, default=Lease.factor)
    option("--lease-initial", type=float, default=Lease.initial_s)
    option(
        "--heartbeat",
        type=float,
        default=HEARTBEAT_S,
        help="seconds between keep-alives to a worker waiting for its turn",
    )
    option(
        "--send-buffer",
        type=int,
        help="bytes of each worker connection's send buffer (SO_SNDBUF; default: the kernel's): "
        "how many unread keep-alives a stopped worker's socket takes before it loses its slot",
    )
    option(
        "--nice",
        type=int,
        default=SERVER_NICE,
        help="run at this nice value if allowed and higher in priority than now",
    )
    option("--control-stdin", action="store_true", help="read launcher commands from stdin; exit at EOF")
    option(
        "--state",
        choices=(TURNS, FREE),
        default=TURNS,
        help="what the devices start in: turns under the policy, or free (granted at once: an adaptive group's "
        "state without turns; the launcher switches between them)",
    )
    option(
        "--metrics-address",
        help="serve the devices' turns to Prometheus on this address, on a port the kernel picks "
        "(said on stdout as `metrics PORT` before `ready`); default: not served",
    )
    option(
        "--metrics-credentials-stdin",
        action="store_true",
        help="read the TLS certificate, key and bearer token the figures are served with from the first line "
        "of stdin (turns/credentials.py); without it they are served as plain HTTP to anyone",
    )
    option(
        "--metrics-ports",
        help="LOW-HIGH: serve them on the first free port of these instead (a firewall opened on them only)",
    )
    option("--metrics-label", action="append", default=[], help="KEY=VALUE (experiment, group, host) on every series")
    option("--slot-name", action="append", default=[], help="SLOT=JOB: the `job` label of a slot")
    return parser


@dataclass(frozen=True)
class MetricsOptions:
    """Where and how a turn server serves its devices' figures to Prometheus (its --metrics-* options)."""

    address: str
    ports: tuple[int, int] | None  # the first free port of these; None: one the kernel picks
    labels: dict[str, str]  # on every series: experiment, group, host
    slot_names: dict[int, str]  # each slot's `job` label
    credentials_stdin: bool  # TLS and a bearer token, from stdin's first line; else plain HTTP to anyone


@dataclass(frozen=True)
class ServerOptions:
    """A turn server's command line, parsed and checked once (`parse`)."""

    socket: str
    devices: dict[int, list[int]]  # device -> its slots, in turn order
    policy: str
    traits: dict[int, SlotTraits]
    join_timeout: float
    lease: Lease
    heartbeat_s: float
    send_buffer: int | None  # None: the kernel's
    nice: int
    control_stdin: bool
    state: str  # TURNS or FREE: what the devices start in (an adaptive group's servers may start free)
    metrics: MetricsOptions | None  # None: no figures served

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> ServerOptions:
        """The options in `argv` (default: the process's); a bad one exits 2 with one line saying which."""
        args = _command_line().parse_args(argv)
        if not 0 < args.heartbeat <= 60:
            _exit_with(f"--heartbeat {args.heartbeat}: expected seconds between 0 and 60")
        if args.send_buffer is not None and not 1 <= args.send_buffer <= 1 << 30:
            _exit_with(f"--send-buffer {args.send_buffer}: expected bytes from 1 to {1 << 30}")
        metrics = None
        if args.metrics_address is not None:
            ports = None if args.metrics_ports is None else parse_port_range(args.metrics_ports)
            if args.metrics_ports is not None and ports is None:
                _exit_with(f"--metrics-ports {args.metrics_ports!r}: expected LOW-HIGH, TCP ports with LOW <= HIGH")
            try:
                labels, names = parse_labels(args.metrics_label), parse_names(args.slot_name)
            except ValueError as error:
                _exit_with(str(error))
            metrics = MetricsOptions(args.metrics_address, ports, labels, names, args.metrics_credentials_stdin)
        try:  # built by the launcher, never typed by a user: still one line, not a traceback
            devices, traits = parse_devices(args.device), parse_traits(args.slot)
        except ValueError as error:
            _exit_with(f"--device {args.device} / --slot {args.slot}: cannot be read ({error})")
        if args.policy not in POLICIES:
            _exit_with(f"--policy {args.policy}: choose {', '.join(POLICIES)}")
        return cls(
            socket=args.socket,
            devices=devices,
            policy=args.policy,
            traits=traits,
            join_timeout=args.join_timeout,
            lease=Lease(args.lease_floor, args.lease_factor, args.lease_initial),
            heartbeat_s=args.heartbeat,
            send_buffer=args.send_buffer,
            nice=args.nice,
            control_stdin=args.control_stdin,
            state=args.state,
            metrics=metrics,
        )


def _serve_metrics(options: MetricsOptions, devices: dict[int, list[int]]) -> tuple[TurnMetrics | None, int | None]:
    """The devices' figures, served as `options` say, and their port; where they cannot be served, (None, None)
    and a line on stderr: the turns matter, the figures do not."""
    try:
        metrics = TurnMetrics(options.labels, options.slot_names, devices)
        credentials = _credentials_from_stdin() if options.credentials_stdin else None
        return metrics, metrics.serve(options.address, options.ports, credentials)
    except ValueError as error:
        _exit_with(str(error))
    except (OSError, XoverError) as error:
        print(
            f"xover turn server: --metrics-address {options.address}: cannot serve its figures there "
            f"({error}); serving turns without them",
            file=sys.stderr,
            flush=True,
        )
        return None, None


def main(argv: list[str] | None = None) -> None:
    """`python -m xover.turns.server`: one turn server, until its controller says stop or goes away."""
    options = ServerOptions.parse(argv)
    _die_with_parent()
    raise_priority(options.nice)
    try:
        private_folder(os.path.dirname(os.path.abspath(options.socket)))
    except FolderError as error:
        _exit_with(str(error))
    metrics, metrics_port = _serve_metrics(options.metrics, options.devices) if options.metrics else (None, None)
    server = TurnServer(
        options.socket,
        options.devices,
        make_policy(options.policy, options.traits),
        options.join_timeout,
        options.lease,
        heartbeat_s=options.heartbeat_s,
        send_buffer=options.send_buffer,
        metrics=metrics,
        state=options.state,
    )

    def stop(*_: object) -> None:
        raise SystemExit(0)  # select() would resume after a handler that only sets a flag

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if options.control_stdin:
        server.watch_stdin()
    if metrics_port is not None:
        print(f"metrics {metrics_port}", flush=True)
    print("ready", flush=True)
    try:
        server.serve()
    finally:
        server.flush_spans()
        try:
            print(stats_line(json.dumps(server.statistics(), separators=(",", ":"))), flush=True)
        except (BrokenPipeError, OSError):
            pass
        server.close()
        if metrics is not None:
            metrics.stop()


if __name__ == "__main__":
    main()
