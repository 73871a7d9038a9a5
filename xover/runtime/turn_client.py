"""A worker's handle on its device's crossover turn (the server is `xover.turns.server`).

    acquire()     a compute phase starts: block until granted (no CPU while waiting)
    checkpoint()  a layer boundary: if the server asked this job to yield, give the turn up and take
                  it back when granted again. A memory read when nobody asks: no socket round trip,
                  no device synchronisation.
    release()     the compute phase is over; the all-reduce goes on outside the turn

Each phase's turn intervals (wall time), yields and time spent yielded are kept for the metrics.

A wait for the turn may last as long as a partner computes, and the server sends a keep-alive byte
every HEARTBEAT_S meanwhile; a server that says nothing for SILENCE_S (hung, stopped, or its host's
kernel lost it) is taken for dead: the worker says so on stderr and trains on without turns, as it
does when the socket closes. The yield page is opened without following a link and used only if it
is a regular file of this user's, at least a page long; otherwise the job runs without yields.
"""

from __future__ import annotations

import mmap
import os
import socket
import stat
import sys
import time
from collections.abc import Callable

from ..records import TurnsLostRecord
from ..settings import (
    DEVICES_VARIABLE,
    HOST_VARIABLE,
    TURN_SLOT_VARIABLE,
    TURN_SOCKET_VARIABLE,
    settings,
)
from ..turns.protocol import (
    ACQUIRE,
    BYE,
    GRANT,
    HEARTBEAT,
    HELLO,
    RELEASE,
    SILENCE_S,
    STEP_IN,
    STEP_OUT,
    YIELD,
    YIELD_PAGE_BYTES,
    host_tag,
    yield_page_path,
)
from .metrics import emit

_NEVER = bytearray(YIELD_PAGE_BYTES)  # the page of a job without a server: no one ever asks to yield


class TurnPhase:
    """What happened to the turn during one compute phase."""

    def __init__(self) -> None:
        self.held: list[list[float]] = []  # [start, end] wall times while holding the turn
        self.yields = 0
        self.yielded_s = 0.0  # waiting to get the turn back after yielding


class NoTurn:
    """Used when a job runs without a group: every turn is free (the same states, no waiting)."""

    crossover = False

    def __init__(self) -> None:
        self.phase = TurnPhase()
        self.holding = False

    def acquire(self) -> float:
        """A new phase, granted at once; no time waited."""
        self.phase = TurnPhase()
        self.holding = True
        return 0.0

    def checkpoint(self) -> None:
        """Nothing to do: no one asks to yield."""
        pass

    def release(self) -> None:
        """The phase is over."""
        self.holding = False

    def step_out(self) -> None:
        """Out of the turn for a collective."""
        self.holding = False

    def step_in(self) -> float:
        """Back in the turn at once; no time waited."""
        self.holding = True
        return 0.0

    def close(self) -> None:
        """Nothing to close."""
        pass


class CrossoverToken:
    """A worker's turn on a device shared with other jobs, from the host's turn server over a Unix socket
    and its yield page."""

    crossover = True

    def __init__(
        self,
        socket_path: str,
        device: int,
        slot: int,
        synchronize: Callable[[], None] | None = None,
        silence_s: float | None = None,
    ) -> None:
        self.device, self.slot = device, slot
        self.synchronize = synchronize or (lambda: None)
        # on a GPU the CPU passes the layer boundaries while it queues the kernels; waiting for them at
        # each boundary keeps it in step with the GPU, so that a yield is seen there (settings.py)
        self.sync_checkpoints = settings().checkpoint_sync  # (a CPU's synchronize does nothing)
        self.holding = False
        self.phase = TurnPhase()
        self.silence_s = silence_s or SILENCE_S
        self._mark = slot + 1
        self._sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(self.silence_s)  # every send and wait: a server silent this long is dead
        self._sock.connect(socket_path)
        self._sock.sendall(HELLO + f"{device} {slot}\n".encode())
        self._page = _map_page(yield_page_path(socket_path))
        self._held_since = 0.0

    def acquire(self) -> float:
        """Wait for this job's turn on the device; returns the seconds spent waiting."""
        self.phase = TurnPhase()
        start = time.perf_counter()
        self._ask(ACQUIRE)
        return time.perf_counter() - start

    def checkpoint(self) -> None:
        """A layer boundary: if the server asks this job to yield, give the turn up and wait to get it back."""
        if self.sync_checkpoints and self.holding:
            self.synchronize()
        if self._page[self.device] == self._mark and self.holding:
            self.synchronize()  # the partner must find the device idle, not our queued kernels
            self._end_hold()
            start = time.perf_counter()
            self._ask(YIELD)
            self.phase.yields += 1
            self.phase.yielded_s += time.perf_counter() - start

    def release(self) -> None:
        """End the compute phase and give the turn up; the all-reduces go on outside it."""
        if not self.holding:
            return
        self._end_hold()
        self._send(RELEASE)

    def step_out(self) -> None:
        """Give the device up mid-phase (for a blocking collective that needs a peer rank)."""
        if self.holding:
            self._end_hold()
            self._send(STEP_OUT)

    def step_in(self) -> float:
        """Take the device back after stepping out: the same phase; returns the seconds waited."""
        start = time.perf_counter()
        self._ask(STEP_IN)
        waited = time.perf_counter() - start
        self.phase.yields += 1
        self.phase.yielded_s += waited
        return waited

    def _send(self, message: bytes) -> None:
        if self._sock is not None:
            try:
                self._sock.sendall(message)
            except TimeoutError:
                self._lost(f"took no message for {self.silence_s:.0f} s (hung or stopped)")
            except OSError:
                self._lost()

    def close(self) -> None:
        """Say goodbye to the server and close the socket; a second call does nothing."""
        if self._sock is not None:
            try:
                self._sock.sendall(BYE)
            except OSError:
                pass
            self._sock.close()
            self._sock = None

    def forget(self) -> None:
        """In a process forked from the worker: close this process's copy of the connection without a word
        on it (the worker's own stays open and its turns its own)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._page = _NEVER
        self.holding = False

    def _ask(self, message: bytes) -> None:
        if self._sock is not None:
            why = "is gone"
            try:
                self._sock.sendall(message)
                reply = self._sock.recv(1)
                while reply == HEARTBEAT:  # still waiting, and the server is alive
                    reply = self._sock.recv(1)
            except TimeoutError:
                reply, why = b"", f"said nothing for {self.silence_s:.0f} s (hung or stopped)"
            except OSError:
                reply = b""
            if reply != GRANT:
                self._lost(why)
        self.holding = True
        self._held_since = time.time()

    def _end_hold(self) -> None:
        self.holding = False
        self.phase.held.append([self._held_since, time.time()])

    def _lost(self, why: str = "is gone") -> None:
        # Without a server the job still trains correctly, only without coordination.
        print(
            f"xover: the turn server of device {self.device} {why}; continuing without crossover turns",
            file=sys.stderr,
            flush=True,
        )
        # and a record, so that the run's record and report say its crossover ended here (any rank's counts)
        emit(TurnsLostRecord(device=self.device, slot=self.slot, why=f"the turn server {why}", wall_time=time.time()))
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._page = _NEVER


def _map_page(path: str):
    """The server's yield page, read-only; _NEVER (no yields) unless it is a regular file of this user's,
    at least a page long, reached without a link. A FIFO or device there cannot block or feed the worker."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return _NEVER
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size < YIELD_PAGE_BYTES:
            print(
                f"xover: {path} is not a turn server's yield page; continuing without yields",
                file=sys.stderr,
                flush=True,
            )
            return _NEVER
        return mmap.mmap(fd, YIELD_PAGE_BYTES, prot=mmap.PROT_READ)
    except OSError:
        return _NEVER
    finally:
        os.close(fd)


def token_from_env(local_rank: int, synchronize: Callable[[], None] | None = None):
    """The turn for this worker's device, from XOVER_TURN_SOCKET (a template: `{host}` is this
    worker's host) / XOVER_TURN_SLOT / XOVER_DEVICES."""
    template = os.environ.get(TURN_SOCKET_VARIABLE)
    if not template:
        return NoTurn()
    path = template.replace("{host}", host_tag(this_host()))
    return CrossoverToken(path, device_of(local_rank), int(os.environ[TURN_SLOT_VARIABLE]), synchronize)


def this_host() -> str:
    """The host name this worker's launcher was given (-H), so emulated hosts on one machine differ."""
    return os.environ.get(HOST_VARIABLE) or os.environ.get("HOROVOD_HOSTNAME") or "localhost"


def device_of(local_rank: int) -> int:
    """Device index a local rank uses: XOVER_DEVICES lists this job's devices, as '0,1' (every host)
    or 'h1=0,1;h2=0,1' (per host)."""
    devices = os.environ.get(DEVICES_VARIABLE)
    if not devices:
        return local_rank
    if "=" in devices:
        devices = dict(item.split("=", 1) for item in devices.split(";")).get(this_host(), "")
        if not devices:
            return local_rank
    return int(devices.split(",")[local_rank])


def install_checkpoints(model, turn) -> list:
    """A turn checkpoint before every module's forward and after every gradient: the layer
    boundaries where a long compute phase can give the turn to a job waiting ahead of it.
    Install after the engine has hooked the gradients (see `after_gradient`)."""
    if isinstance(turn, NoTurn):
        return []
    handles = [module.register_forward_pre_hook(lambda *_: turn.checkpoint()) for module in model.modules()]
    for parameter in model.parameters():
        if parameter.requires_grad:
            handles.append(after_gradient(parameter, turn.checkpoint))
    return handles


def after_gradient(parameter, callback: Callable[[], None]):
    """Call `callback` once the parameter's gradient is accumulated and the hooks the engine put on it
    have run: a hook of the gradient's accumulator node, registered after theirs. Horovod's and DDP's
    hooks, which start the gradient's all-reduce, are such node hooks, and a tensor's own
    post-accumulate hook runs before every one of them: a yield there held the all-reduce back for
    the partner's whole turn. Returns what keeps the node (and so the hook) alive."""
    accumulator = parameter.expand_as(parameter).grad_fn.next_functions[0][0]
    accumulator.register_hook(lambda *_: callback())
    return accumulator
