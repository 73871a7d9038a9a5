"""Crossover Synchronization: the jobs of a group take turns on each device, in a fixed order.

A turn server (one process per host, started by whoever launches the group) keeps, for every
device, the round-robin order of the job slots placed on it and grants the turn strictly in that
order: slot 0, 1, ..., k-1, 0, ... The same order on every device means that all ranks of a job
compute in the same turn, so no all-reduce waits on a rank that is still queued elsewhere.

Workers talk to it over a Unix socket with one-byte messages (acquire, release, bye); a waiting
worker is blocked in recv(), so it uses no CPU. A worker that exits or is killed closes its socket,
the server sees EOF at once and drops it from the rotation, so its partners never stall.
Nothing here depends on the training engine.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

HELLO, ACQUIRE, RELEASE, BYE, GRANT = b"H", b"A", b"R", b"B", b"G"
WITHDRAW = b"W"  # from the launcher: a job has exited (or never started); drop its slot everywhere


def runtime_dir() -> str:
    """Per-user directory, owner-only, for the sockets of every run of this user on this host."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/xover-{os.getuid()}"
    path = os.path.join(base, "xover") if os.environ.get("XDG_RUNTIME_DIR") else base
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user; set XDG_RUNTIME_DIR")
    os.chmod(path, 0o700)
    return path


# --------------------------------------------------------------------------------------- client


class NoTurn:
    """Used when a job runs without a group: every turn is free."""

    def acquire(self) -> float:
        return 0.0

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class CrossoverToken:
    """A worker's handle on its device's turn. `acquire` blocks until the server grants the turn."""

    def __init__(self, socket_path: str, device: int, slot: int) -> None:
        self.device, self.slot = device, slot
        self._sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(socket_path)
        self._sock.sendall(HELLO + f"{device} {slot}\n".encode())

    def acquire(self) -> float:
        """Wait for this job's turn on the device; returns the seconds spent waiting."""
        if self._sock is None:
            return 0.0
        start = time.perf_counter()
        try:
            self._sock.sendall(ACQUIRE)
            reply = self._sock.recv(1)
        except OSError:
            reply = b""
        if reply != GRANT:
            self._lost()
        return time.perf_counter() - start

    def release(self) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendall(RELEASE)
        except OSError:
            self._lost()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.sendall(BYE)
            except OSError:
                pass
            self._sock.close()
            self._sock = None

    def _lost(self) -> None:
        # Without a server the job still trains correctly, only without coordination.
        print("xover: the turn server is gone; continuing without crossover turns", file=sys.stderr, flush=True)
        if self._sock is not None:
            self._sock.close()
        self._sock = None


def token_from_env(local_rank: int):
    """The turn for this worker's device, from XOVER_TURN_SOCKET / XOVER_TURN_SLOT / XOVER_DEVICES."""
    path = os.environ.get("XOVER_TURN_SOCKET")
    if not path:
        return NoTurn()
    return CrossoverToken(path, device_of(local_rank), int(os.environ["XOVER_TURN_SLOT"]))


def device_of(local_rank: int) -> int:
    """Device index a local rank uses: XOVER_DEVICES lists this job's devices on the host."""
    devices = os.environ.get("XOVER_DEVICES")
    if not devices:
        return local_rank
    return int(devices.split(",")[local_rank])


# --------------------------------------------------------------------------------------- server


@dataclass
class DeviceTurns:
    """Round-robin state of one device."""

    order: list[int]  # slots placed on this device, in turn order
    ready: set[int] = field(default_factory=set)  # slots that asked for a turn at least once
    gone: set[int] = field(default_factory=set)
    requested: set[int] = field(default_factory=set)
    holder: int | None = None
    position: int = 0  # index in `order` of the slot whose turn it is
    open: bool = False  # the start barrier: no turn before every slot is ready to train (or gone)

    def open_if_all_ready(self) -> None:
        if self.ready | self.gone >= set(self.order):
            self.open = True

    def next_grant(self) -> int | None:
        """The slot to grant now, if any: strictly the current one in the order, never a later one."""
        if not self.open or self.holder is not None:
            return None
        for _ in range(len(self.order)):
            slot = self.order[self.position]
            if slot not in self.gone:
                return slot if slot in self.requested else None
            self.position = (self.position + 1) % len(self.order)
        return None

    def pass_turn(self) -> None:
        self.holder = None
        self.position = (self.position + 1) % len(self.order)


class TurnServer:
    def __init__(self, path: str, devices: dict[int, list[int]], join_timeout_s: float = 300.0) -> None:
        self.path = path
        self.devices = {d: DeviceTurns(order=list(slots)) for d, slots in devices.items()}
        self.join_deadline = time.monotonic() + join_timeout_s
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(64)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.members: dict[socket.socket, tuple[int, int] | None] = {}
        self.buffers: dict[socket.socket, bytes] = {}
        self.running = True

    def serve(self) -> None:
        try:
            while self.running:
                timeout = None
                if not all(d.open for d in self.devices.values()):
                    timeout = max(0.0, self.join_deadline - time.monotonic())
                for key, _ in self.selector.select(timeout):
                    if key.fileobj is self.listener:
                        conn, _ = self.listener.accept()
                        self.members[conn] = None
                        self.buffers[conn] = b""
                        self.selector.register(conn, selectors.EVENT_READ, None)
                    else:
                        self._on_readable(key.fileobj)
                if timeout is not None and time.monotonic() >= self.join_deadline:
                    self._close_barrier_on_latecomers()
        finally:
            self.close()

    def _on_readable(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        buffer = self.buffers[conn] + data
        while buffer:
            command = buffer[:1]
            if command == HELLO:
                end = buffer.find(b"\n")
                if end < 0:
                    break  # the rest of the line is still in flight
                device, slot = (int(x) for x in buffer[1:end].split())
                buffer = buffer[end + 1:]
                self._join(conn, device, slot)
                continue
            if command == WITHDRAW:
                end = buffer.find(b"\n")
                if end < 0:
                    break
                self._withdraw(int(buffer[1:end]))
                buffer = buffer[end + 1:]
                continue
            buffer = buffer[1:]
            member = self.members.get(conn)
            if member is None:
                continue
            turns = self.devices[member[0]]
            if command == ACQUIRE:
                turns.requested.add(member[1])
                turns.ready.add(member[1])
                turns.gone.discard(member[1])  # a slow starter given up on at the barrier is back
                turns.open_if_all_ready()
            elif command == RELEASE and turns.holder == member[1]:
                turns.pass_turn()
            elif command == BYE:
                self._leave(member)
                self.members[conn] = None
            self._grant(member[0])
        self.buffers[conn] = buffer

    def _join(self, conn: socket.socket, device: int, slot: int) -> None:
        turns = self.devices.setdefault(device, DeviceTurns(order=[slot]))
        if slot not in turns.order:  # not announced at start: joins at the end of the order
            turns.order.append(slot)
        self.members[conn] = (device, slot)
        turns.gone.discard(slot)

    def _leave(self, member: tuple[int, int]) -> None:
        device, slot = member
        turns = self.devices[device]
        turns.gone.add(slot)
        turns.open_if_all_ready()
        turns.requested.discard(slot)
        if turns.holder == slot:
            turns.pass_turn()

    def _withdraw(self, slot: int) -> None:
        for device, turns in self.devices.items():
            if slot in turns.order and slot not in turns.gone:
                self._leave((device, slot))
                turns.open_if_all_ready()
                self._grant(device)

    def _drop(self, conn: socket.socket) -> None:
        member = self.members.pop(conn, None)
        self.buffers.pop(conn, None)
        self.selector.unregister(conn)
        conn.close()
        if member is not None:
            # Died without saying bye: the job cannot finish any all-reduce now (synchronous SGD), so
            # its turns are dropped on every device at once rather than when its other ranks are reaped.
            self._withdraw(member[1])

    def _close_barrier_on_latecomers(self) -> None:
        # A slot that never became ready (its job is stuck starting) must not hold the others back.
        for device, turns in self.devices.items():
            if not turns.open:
                turns.gone |= set(turns.order) - turns.ready
                turns.open = True
                self._grant(device)

    def _grant(self, device: int) -> None:
        turns = self.devices[device]
        slot = turns.next_grant()
        if slot is None:
            return
        for conn, member in self.members.items():
            if member == (device, slot):
                turns.holder = slot
                turns.requested.discard(slot)
                try:
                    conn.sendall(GRANT)
                except OSError:
                    self._leave(member)
                return

    def close(self) -> None:
        for conn in list(self.members):
            conn.close()
        self.listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def withdraw_slot(socket_path: str, slot: int) -> None:
    """Tell a turn server that a job has ended, so that no partner waits for it (even at the barrier)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(socket_path)
            conn.sendall(WITHDRAW + f"{slot}\n".encode())
    except OSError:
        pass  # the server is gone: nobody is waiting


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="xover turn server (one per host and group)")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--device", action="append", default=[], help="DEVICE=SLOT,SLOT,... in turn order")
    parser.add_argument("--join-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    _die_with_parent()
    server = TurnServer(args.socket, parse_devices(args.device), args.join_timeout)

    def stop(*_):
        server.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    server.serve()


if __name__ == "__main__":
    main()
