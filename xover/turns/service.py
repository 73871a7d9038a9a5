"""The launcher's side of the turn service: a group's turn servers, one per host of the group.

Each host's server is started through the path the engine uses to reach that host (directly here,
over ssh elsewhere), is driven through its stdin (job ended: withdraw its slot; quit) and ends when
that stdin closes, so nothing outlives the run on any host. Independent servers stay consistent
because every device decides by the same policy from the same events, and a job's all-reduces keep
its ranks in step. Workers find their host's server through XOVER_TURN_SOCKET, a template whose
`{host}` they fill in (emulated hosts share one filesystem, so each host's socket has its own name).
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import XoverError
from ..launch.hosts import LOCAL, is_local
from .policies import SlotTraits

XOVER_ROOT = str(Path(__file__).resolve().parent.parent.parent)  # so that remote hosts import this xover


def runtime_dir() -> str:
    """Per-user directory, owner-only, for the sockets of every run of this user on this host."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/xover-{os.getuid()}"
    path = os.path.join(base, "xover") if os.environ.get("XDG_RUNTIME_DIR") else base
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user; set XDG_RUNTIME_DIR")
    os.chmod(path, 0o700)
    return path


def host_tag(host: str) -> str:
    """A host's name as it appears in socket names. Launchers are given canonical names (this
    machine's names are `localhost`), and workers use the name they were given as it is: inside an
    emulated host the hostname is the host's own, so a worker must not canonicalise by it."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in host)


def server_arguments(socket_path: str, devices: dict[int, list[int]], policy: str,
                     traits: dict[int, SlotTraits], lease: dict[str, float] | None = None,
                     nice: int | None = None) -> list[str]:
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
    if nice is not None:
        args += ["--nice", str(nice)]
    return args


@dataclass
class TurnServerProcess:
    """One host's turn server, driven through its stdin; its stdout is read by a thread."""

    host: str
    socket: str
    command: list[str]
    events: list[dict] = field(default_factory=list)
    stats: dict | None = None

    env: dict[str, str] | None = None

    def __post_init__(self) -> None:
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True,
                                        env={**os.environ, **(self.env or {})})
        first = self.process.stdout.readline().decode(errors="replace").strip()
        if first != "ready":
            self.process.kill()
            _, error = self.process.communicate()
            detail = error.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise XoverError(f"the crossover turn server on {self.host} did not start ({detail[0]}); "
                             "run `xover doctor`")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # read, so that a chatty server never blocks on a full pipe, and kept, for a server that dies
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self.stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.stderr_reader.start()

    def _read_stderr(self) -> None:
        for raw in self.process.stderr:
            self.stderr_tail.append(raw[-2000:].decode(errors="replace").rstrip())  # a line, not megabytes

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            kind, _, payload = line.partition(" ")
            try:
                if kind == "event":
                    self.events.append({**json.loads(payload), "host": self.host})
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

    def stop(self, timeout_s: float = 10.0) -> None:
        died = self.process.poll() is not None  # before it was asked to stop: the jobs went on without turns
        if not died:
            self.send("Q")
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=timeout_s)
        self.stderr_reader.join(timeout=timeout_s)
        if died:
            self.events.append({"kind": "server-died", "host": self.host, "exit_code": self.process.returncode,
                                "stderr": "\n".join(self.stderr_tail)})
        try:
            self.process.stdin.close()
        except OSError:
            pass
        if is_local(self.host):  # a remote server removes its own files when its stdin closes
            for path in (self.socket, self.socket + ".yield"):
                if os.path.exists(path):
                    os.unlink(path)


class TurnService:
    """The turn servers of one crossover group."""

    def __init__(self, name: str, placements: list[dict[str, list[int]]], policy: str,
                 traits: dict[int, SlotTraits], remote_prefix: list[str] | None = None,
                 env: dict[str, str] | None = None, lease: dict[str, float] | None = None,
                 nice: int | None = None) -> None:
        """`placements[slot]` is slot's job's host -> device indices; `name` is unique per run and group."""
        self.socket_template = os.path.join(runtime_dir(), f"{name}-{{host}}.sock")
        devices: dict[str, dict[int, list[int]]] = {}
        for slot, placement in enumerate(placements):
            for host, indices in placement.items():
                for index in indices:
                    devices.setdefault(host_tag(host), {}).setdefault(index, []).append(slot)
        self.servers: list[TurnServerProcess] = []
        tag = {k: v for k, v in (env or {}).items() if k == "XOVER_EXPERIMENT"}
        try:
            for host, order in devices.items():
                path = self.socket_template.replace("{host}", host)
                arguments = server_arguments(path, order, policy, traits, lease, nice)
                if host == LOCAL:
                    command = [sys.executable, *arguments]
                    self.servers.append(TurnServerProcess(host, path, command, env={"PYTHONPATH": XOVER_ROOT, **tag}))
                else:
                    remote = (f"mkdir -p -m 700 {shlex.quote(os.path.dirname(path))} && env "
                              + " ".join(shlex.quote(f"{k}={v}") for k, v in {"PYTHONPATH": XOVER_ROOT, **tag}.items())
                              + f" {shlex.quote(sys.executable)} {shlex.join(arguments)}")
                    command = [*(remote_prefix or []), "ssh", "-o", "BatchMode=yes", host, remote]
                    self.servers.append(TurnServerProcess(host, path, command))
        except BaseException:
            self.stop()
            raise

    def withdraw(self, slot: int) -> None:
        """A job has ended (or never started): no partner may wait for it, even at the barrier."""
        for server in self.servers:
            server.send(f"W{slot}")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    @property
    def events(self) -> list[dict]:
        return [event for server in self.servers for event in server.events]

    def slot_statistics(self) -> dict[str, dict]:
        """Per slot over every host: grants, yields, revocations, and the skew between the first grants
        of one iteration on all of the job's devices (how far apart its ranks got their turns)."""
        merged: dict[str, dict] = {}
        for server in self.servers:
            for slot, entry in ((server.stats or {}).get("slots") or {}).items():
                into = merged.setdefault(slot, {"grants": 0, "yields": 0, "revoked": 0, "spans": {}})
                for key in ("grants", "yields", "revoked"):
                    into[key] += entry.get(key, 0)
                for iteration, first, last, count in entry.get("grant_spans", []):
                    low, high, seen = into["spans"].get(iteration, (first, last, 0))
                    into["spans"][iteration] = (min(low, first), max(high, last), seen + count)
        return {slot: summarise(entry) for slot, entry in merged.items()}


def summarise(entry: dict) -> dict:
    skews = sorted((last - first) * 1000 for first, last, devices in entry["spans"].values() if devices > 1)

    def quantile(q: float) -> float | None:
        return skews[min(len(skews) - 1, int(q * len(skews)))] if skews else None

    return {"grants": entry["grants"], "yields": entry["yields"], "revoked": entry["revoked"],
            "skew_p50_ms": quantile(0.5), "skew_p90_ms": quantile(0.9), "skew_max_ms": skews[-1] if skews else None,
            "iterations": len(entry["spans"])}
