"""Issue 58, finding 1: Ctrl-C, SIGTERM (scancel, a Slurm time limit) while a unit starts. Starting the
turn servers (and torchrun's ssh calls) takes tens of seconds over ssh, and an interrupt then was taken for
a failure of the start: the unit's runs closed `failed` with "could not start: Interrupted()" (which
Slurm's later account of the job leaves as it is), and the turn server being started was in no list, so
nothing stopped it.

The slow start here is real code over a slow host: `xover run -H node9:2` reaches node9 through an `ssh`
on PATH that runs each command on this machine, as ssh would there, only after a long pause for the turn
server's (a login node under load). Every process the run starts is real."""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from xover.run.reaper import tagged_processes

ROOT = Path(__file__).resolve().parents[2]
SLOW_HOST_SSH = """#!/bin/sh
# node9: every command runs here, as ssh would run it there; its turn server starts after a long pause
for last; do :; done
case "$last" in
  *xover.turns.server*) echo $$ > {marker}.tmp; mv {marker}.tmp {marker}; sleep 300 ;;
esac
exec sh -c "$last"
"""


def _slow_host(tmp_path, monkeypatch):
    """An `ssh` on PATH whose turn server starts late; the file its pid is written to once it is started."""
    folder = tmp_path / "bin"
    folder.mkdir()
    marker = tmp_path / "slow-start.pid"
    (folder / "ssh").write_text(SLOW_HOST_SSH.format(marker=marker))
    (folder / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return marker


def _wait_for(marker, process=None, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        assert time.monotonic() < deadline, "the turn server's start was never reached"
        assert process is None or process.poll() is None, process.communicate()
        time.sleep(0.05)
    return int(marker.read_text())


def _gone(pid, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)  # the slow start's own `sleep`, whatever the test found
    except (ProcessLookupError, PermissionError):
        pass


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_while_the_turn_servers_start_is_recorded_as_one_and_stops_them(
        isolated_results, tmp_path, monkeypatch, sent):
    marker = _slow_host(tmp_path, monkeypatch)
    xover = subprocess.Popen([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "mlp-digits",
                              "--mode", "crossover", "-H", "node9:2", "--iterations", "5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    pid = None
    try:
        pid = _wait_for(marker, xover)  # the turn server's ssh is started, and waited for
        time.sleep(0.5)
        xover.send_signal(sent)
        _, err = xover.communicate(timeout=120)
        assert xover.returncode == 130, err[-3000:]
        with sqlite3.connect(isolated_results / "xover.db") as db:
            runs = db.execute("SELECT status, error FROM runs").fetchall()
            [(experiment, status)] = db.execute("SELECT id, status FROM experiments").fetchall()
        assert status == "interrupted"
        assert runs and all(run == ("interrupted", None) for run in runs), runs  # before: failed, could not start
        assert _gone(pid), "the turn server started on node9 (its ssh) outlived the run"
        assert not tagged_processes(experiment)
    finally:
        if xover.poll() is None:
            xover.kill()
        if pid is not None:
            _kill_group(pid)


def test_a_turn_server_is_listed_from_its_start_so_an_interrupt_while_it_is_awaited_stops_it(tmp_path, monkeypatch):
    """The turn service's part: a server that is being waited for is in `servers`, and an interrupt in the
    wait stops it (before: it was listed only once ready, and stayed)."""
    from xover.run.supervise import Interrupted, interruptible, uninterrupted
    from xover.turns.service import TurnService

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    marker = _slow_host(tmp_path, monkeypatch)
    service = TurnService("e58-r1", [{"node9": [0]}, {"node9": [0]}], "work-conserving", {}, start=False,
                          guard=uninterrupted)
    interrupter = threading.Thread(target=lambda: (_wait_for(marker), time.sleep(0.3),
                                                   os.kill(os.getpid(), signal.SIGINT)), daemon=True)
    pid = None
    try:
        interrupter.start()
        with pytest.raises(Interrupted), interruptible():
            service.start()
        pid = int(marker.read_text())
        [server] = service.servers
        assert server.process.pid == pid and not server.ready
        assert _gone(pid)
        service.stop()  # again, as the unit's teardown does: nothing more
        assert service.events == []
    finally:
        if pid is not None:
            _kill_group(pid)


REFUSING_HOST_SSH = """#!/bin/sh
# node9: every command runs here, as ssh would run it there; its sshd is down for the turn server's
for last; do :; done
case "$last" in
  *xover.turns.server*) echo "ssh: connect to host node9 port 22: Connection refused" >&2; exit 255 ;;
esac
exec sh -c "$last"
"""


def test_a_turn_server_that_does_not_start_fails_the_run_with_exit_1_its_runs_kept(isolated_results, tmp_path,
                                                                                   monkeypatch):
    """A host whose sshd was down for the turn server: one line and exit 2, the exit of refused input that
    keeps nothing, while its experiment was stored with its runs failed. Now exit 1, as a run whose jobs did not
    finish: what it kept says why."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "ssh").write_text(REFUSING_HOST_SSH)
    (folder / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    ran = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "mlp-digits", "--mode",
                          "crossover", "-H", "node9:2", "--iterations", "5"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "the crossover turn server on node9 did not start (ssh: connect to host node9 port 22: Connection " \
           "refused)" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr[-3000:]
    with sqlite3.connect(isolated_results / "xover.db") as db:
        runs = db.execute("SELECT status, error FROM runs").fetchall()
        [(experiment, status)] = db.execute("SELECT id, status FROM experiments").fetchall()
    assert status == "failed" and len(runs) == 2 and all(run[0] == "failed" for run in runs), runs
    assert not tagged_processes(experiment)
