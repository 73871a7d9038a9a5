"""The launcher's side of the turn service: start a group's turn server, tell it about jobs that
ended, collect what it reports, and stop it. Workers find the server through XOVER_TURN_SOCKET."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from ..errors import XoverError
from .policies import SlotTraits


def runtime_dir() -> str:
    """Per-user directory, owner-only, for the sockets of every run of this user on this host."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/xover-{os.getuid()}"
    path = os.path.join(base, "xover") if os.environ.get("XDG_RUNTIME_DIR") else base
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user; set XDG_RUNTIME_DIR")
    os.chmod(path, 0o700)
    return path


def server_arguments(socket_path: str, devices: dict[int, list[int]], policy: str,
                     traits: dict[int, SlotTraits], lease: dict[str, float] | None = None) -> list[str]:
    """The turn server's command line (after the Python interpreter)."""
    args = ["-m", "xover.turns.server", "--socket", socket_path, "--policy", policy, "--control-stdin"]
    args += [f"--device={d}={','.join(map(str, slots))}" for d, slots in sorted(devices.items())]
    for slot, trait in sorted(traits.items()):
        values = {"rank": trait.rank, "max_slowdown": trait.max_slowdown, "solo_s": trait.solo_iteration_s}
        text = ",".join(f"{k}={v:.6g}" for k, v in values.items() if v is not None)
        if text:
            args.append(f"--slot={slot}:{text}")
    for key, value in (lease or {}).items():
        args += [f"--lease-{key}", str(value)]
    return args


@dataclass
class TurnServerProcess:
    """One turn server (this host's), driven through its stdin; its stdout is read by a thread."""

    socket: str
    command: list[str]
    events: list[dict] = field(default_factory=list)
    stats: dict | None = None

    def __post_init__(self) -> None:
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        start_new_session=True)
        first = self.process.stdout.readline().decode(errors="replace").strip()
        if first != "ready":
            self.process.kill()
            self.process.wait()
            raise XoverError("the crossover turn server did not start; run `xover doctor`")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            kind, _, payload = line.partition(" ")
            try:
                if kind == "event":
                    self.events.append(json.loads(payload))
                elif kind == "stats":
                    self.stats = json.loads(payload)
            except json.JSONDecodeError:
                pass

    def send(self, command: str) -> None:
        try:
            self.process.stdin.write(command.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the server is gone: nobody is waiting on it

    def withdraw(self, slot: int) -> None:
        """A job has ended (or never started): no partner may wait for it, even at the barrier."""
        self.send(f"W{slot}")

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.process.poll() is None:
            self.send("Q")
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=timeout_s)
        try:
            self.process.stdin.close()
        except OSError:
            pass
        for path in (self.socket, self.socket + ".yield"):
            if os.path.exists(path):
                os.unlink(path)


def start_local_server(socket_path: str, devices: dict[int, list[int]], policy: str,
                       traits: dict[int, SlotTraits], lease: dict[str, float] | None = None) -> TurnServerProcess:
    return TurnServerProcess(socket_path, [sys.executable, *server_arguments(socket_path, devices, policy, traits, lease)])
