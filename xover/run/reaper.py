"""The reaper: what stops a run's processes when xover itself is killed (SIGKILL, the OOM killer).

xover starts it at the beginning of an experiment, in its own session, holding a pipe to it. When
the experiment ends normally xover writes `done` and closes the pipe; if the pipe closes without it,
xover died: the reaper stops every process carrying XOVER_EXPERIMENT=<id> in its environment (every
launcher, worker and turn server of the run has it; on other hosts through ssh), removes the run's
sockets, and marks the experiment's unfinished rows `lost`.

    python -m xover.run.reaper --experiment ID [--db URL] [--host HOST ...]   (reads stdin: "host NAME"
                                                                               lines, then "done")
    python -m xover.run.reaper --kill ID [--kill ID ...] [--remove-sent NAME ...]   (this host only, now)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from ..processes import kill_tagged, remove_sent, sweep, tagged_processes  # noqa: F401 - tagged_processes: for tests and tools
from ..settings import EXPERIMENT_VARIABLE, REAPER_DB_VARIABLE, TURN_SERVER_VARIABLE
from ..sharing import RunStatus

# Every run starts a reaper, and nearly every reaper only reads `done` and exits: what reaping needs (the
# store, the turn servers' folder: SQLAlchemy and the turn service, about 0.7 CPU-s to import) is loaded
# when it reaps, inside the functions below (docs/measurements.md, *make test's time*).

CANCEL_RETRY_S = 60.0  # a scheduler's controller slow to answer is asked again, for a minute


def remove_sockets(experiment: str) -> None:
    """Remove this host's turn sockets and yield pages whose names start with `experiment`."""
    from ..turns.service import runtime_dir

    folder = runtime_dir()
    for name in os.listdir(folder):
        if name.startswith(experiment):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def mark_lost(db: str | None, experiment_id: str) -> None:
    """Mark the experiment `lost` if its row still says running (removed where nothing of it was recorded)."""
    from ..store.models import Experiment
    from ..store.session import open_store
    from .record import end_lost

    store = open_store(db)
    try:
        with store.session() as session, session.begin():
            experiment = session.get(Experiment, experiment_id)
            if experiment is not None and experiment.status == RunStatus.RUNNING:
                end_lost(session, experiment)
    finally:
        store.close()


def reap(
    experiment: str,
    db: str | None,
    hosts: list[str],
    remote_prefix: list[str],
    cancel_commands: list[list[str]] | None = None,
) -> None:
    """Clean up after a dead xover: cancel the jobs it submitted to a launcher's scheduler, stop its
    processes here and on `hosts`, remove its sockets and mark it lost."""
    for command in cancel_commands or []:  # the groups it submitted: cancelled, not left running unwatched
        run_until_done(command, CANCEL_RETRY_S)
    sweep(EXPERIMENT_VARIABLE, [experiment], hosts, remote_prefix)
    remove_sockets(experiment)
    mark_lost(db, experiment)


def run_until_done(command: list[str], limit_s: float) -> bool:
    """Run `command` until it exits 0 (pauses of 1, 2, 4 ... s between tries), for at most `limit_s`: a
    scheduler slow to answer is asked again. Whether it succeeded (unreachable: nothing more to do)."""
    deadline, pause = time.monotonic() + limit_s, 1.0
    while True:
        try:
            if (
                subprocess.run(command, capture_output=True, timeout=max(1.0, deadline - time.monotonic())).returncode
                == 0
            ):
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
        if time.monotonic() + pause > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 15.0)


def main(argv: list[str] | None = None) -> None:
    """The reaper's entry point: with --kill, stop those tags' processes here now; else wait on stdin and reap
    unless xover said `done`."""
    parser = argparse.ArgumentParser(description="xover's reaper (started by xover itself)")
    parser.add_argument("--experiment")
    parser.add_argument(
        "--db",
        default=os.environ.get(REAPER_DB_VARIABLE),
        help=f"the store (default: ${REAPER_DB_VARIABLE}, which keeps a password out of the process list)",
    )
    parser.add_argument("--host", action="append", default=[])
    parser.add_argument("--remote-prefix", default="", help="command prefix to reach other hosts (space-separated)")
    parser.add_argument(
        "--kill",
        action="append",
        help="stop the processes tagged with this value on this host now, and exit (repeat it for several values)",
    )
    parser.add_argument(
        "--remove-sent",
        action="append",
        default=[],
        help="with --kill, then: remove this file of settings sent to this host, if no node read it (its name in "
        "the temporary folder; repeat it for several)",
    )
    parser.add_argument("--variable", default=EXPERIMENT_VARIABLE, help="the tag's environment variable (with --kill)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for xover, not for us
    if args.kill:
        kill_tagged(*args.kill, variable=args.variable)
        for value in args.kill:
            if args.variable == EXPERIMENT_VARIABLE:
                remove_sockets(value)
            elif args.variable == TURN_SERVER_VARIABLE:  # one group's turn server that hung: its socket and page
                remove_sockets(value + "-")
        remove_sent(args.remove_sent)  # after the kill: no node of the run is left to read them
        return
    last = b""
    hosts = list(args.host)
    cancel_commands: list[list[str]] = []
    # "host NAME" / "cancel [ARGV...]": what the run reached and submitted; "done": it ended properly
    for line in sys.stdin.buffer:
        line = line.strip()
        if line.startswith(b"host "):
            hosts.append(line[5:].decode())
        elif line.startswith(b"cancel "):
            cancel_commands.append(json.loads(line[7:]))
        elif line:
            last = line
    if last != b"done":
        reap(args.experiment, args.db, sorted(set(hosts)), args.remote_prefix.split(), cancel_commands)


if __name__ == "__main__":
    main()
