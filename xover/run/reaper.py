"""The reaper: what stops a run's processes when xover itself is killed (SIGKILL, the OOM killer).

xover starts it at the beginning of an experiment, in its own session, holding a pipe to it. When
the experiment ends normally xover writes `done` and closes the pipe; if the pipe closes without it,
xover died: the reaper stops every process carrying XOVER_EXPERIMENT=<id> in its environment (every
launcher, worker and turn server of the run has it; on other hosts through ssh), removes the run's
sockets, and marks the experiment's unfinished rows `lost`.

    python -m xover.run.reaper --experiment ID [--db URL] [--host HOST ...]   (reads stdin: "host NAME"
                                                                               lines, then "done")
    python -m xover.run.reaper --kill ID                                      (this host only, now)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import signal
import subprocess
import sys
import time


_XOVER_ROOT = str(Path(__file__).resolve().parents[2])


def tagged_processes(experiment: str, variable: str = "XOVER_EXPERIMENT") -> list[int]:
    """Pids whose environment carries <variable>=<experiment> (this user's processes, in any namespace)."""
    needle = f"{variable}={experiment}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue  # gone, or another user's
    return found


def kill_tagged(experiment: str, grace_s: float = 3.0, variable: str = "XOVER_EXPERIMENT") -> int:
    pids = tagged_processes(experiment, variable)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def remove_sockets(experiment: str) -> None:
    from ..turns.service import runtime_dir

    folder = runtime_dir()
    for name in os.listdir(folder):
        if name.startswith(experiment):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def mark_lost(db: str | None, experiment_id: str) -> None:
    from ..store.models import Experiment
    from ..store.session import open_store
    from .record import mark_lost as mark

    store = open_store(db)
    try:
        with store.session() as session, session.begin():
            experiment = session.get(Experiment, experiment_id)
            if experiment is not None and experiment.status == "running":
                mark(session, experiment)
    finally:
        store.close()


def sweep(variable: str, value: str, hosts: list[str], remote_prefix: list[str]) -> None:
    """Stop the processes tagged <variable>=<value> here and on `hosts` (through ssh, as launchers do)."""
    kill_tagged(value, variable=variable)
    for host in hosts:
        try:
            subprocess.run([*remote_prefix, "ssh", "-o", "BatchMode=yes", host, "env", f"PYTHONPATH={_XOVER_ROOT}",
                            sys.executable, "-m", "xover.run.reaper", "--kill", value, "--variable", variable],
                           timeout=60, capture_output=True)
        except (OSError, subprocess.TimeoutExpired):
            pass


def reap(experiment: str, db: str | None, hosts: list[str], remote_prefix: list[str]) -> None:
    sweep("XOVER_EXPERIMENT", experiment, hosts, remote_prefix)
    remove_sockets(experiment)
    mark_lost(db, experiment)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="xover's reaper (started by xover itself)")
    parser.add_argument("--experiment")
    parser.add_argument("--db")
    parser.add_argument("--host", action="append", default=[])
    parser.add_argument("--remote-prefix", default="", help="command prefix to reach other hosts (space-separated)")
    parser.add_argument("--kill", help="stop the processes tagged with this value on this host now, and exit")
    parser.add_argument("--variable", default="XOVER_EXPERIMENT", help="the tag's environment variable (with --kill)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for xover, not for us
    if args.kill:
        kill_tagged(args.kill, variable=args.variable)
        if args.variable == "XOVER_EXPERIMENT":
            remove_sockets(args.kill)
        return
    last = b""
    hosts = list(args.host)
    for line in sys.stdin.buffer:  # "host NAME": a host the run reached; "done": the run ended properly
        line = line.strip()
        if line.startswith(b"host "):
            hosts.append(line[5:].decode())
        elif line:
            last = line
    if last != b"done":
        reap(args.experiment, args.db, sorted(set(hosts)), args.remote_prefix.split())


if __name__ == "__main__":
    main()
