"""Issue 38, the findings after the first session's (docs/security.md): the turn server's folder and
yield page on any host, a worker's bounded wait for a dead server, waits that could last for ever
(a stalled ssh, the turn server's `ready`, --timeout while a unit starts), the store on a network
filesystem, a transient Slurm error, pid reuse in the reaper, memory that grew all run, and launchers
that inherited xover's terminal. Each test failed on `main` before its fix (the note in each says how).

Run from the repository root: .venv/bin/python -m pytest tests/integration/test_hardening.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
PYTHON = sys.executable


def _root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root: the folder or process belongs to another user")


def _server(path, *devices, heartbeat=None, extra=()):
    args = [PYTHON, "-m", "xover.turns.server", "--socket", str(path), "--control-stdin", "--join-timeout", "30",
            *[f"--device={d}" for d in devices], *(["--heartbeat", str(heartbeat)] if heartbeat else []), *extra]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _started(proc):
    line = proc.stdout.readline().strip()
    assert line == "ready", proc.stderr.read()
    return proc


def _finish(proc, timeout=10):
    """Quit the server; the lines it printed."""
    if proc.poll() is None:
        try:
            proc.stdin.write("Q\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
    out, _ = proc.communicate(timeout=timeout)
    return [line for line in out.splitlines() if line]


def _in_thread(action, timeout):
    """Run `action()` in a thread; (finished in time, its result or exception)."""
    box = {}

    def run():
        try:
            box["result"] = action()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), box.get("error", box.get("result"))


# ---------------------------------------------------------------------------------------------
# 3. The turn server's folder and yield page; a worker's wait for a dead server
# ---------------------------------------------------------------------------------------------

def test_a_turn_server_refuses_a_folder_of_another_user(tmp_path):
    """Before: the server (also as started over ssh on another host) used the folder as it found it."""
    _root_only()
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o777)
    os.chown(folder, NOBODY, NOBODY)
    proc = _server(folder / "g.sock", "0=0")
    try:
        _, error = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the server started in a folder that belongs to another user")
    assert proc.returncode == 2
    assert "belongs to uid 65534" in error and "XDG_RUNTIME_DIR" in error
    assert len(error.strip().splitlines()) == 1  # one line, no traceback
    assert not (folder / "g.sock").exists() and not (folder / "g.sock.yield").exists()


def test_a_turn_server_refuses_a_link_in_place_of_its_folder(tmp_path):
    """Before: a link was followed to wherever it pointed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "sockets").symlink_to(elsewhere)
    proc = _server(tmp_path / "sockets" / "g.sock", "0=0")
    try:
        _, error = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the server started in a folder reached through a link")
    assert proc.returncode == 2 and "is a link" in error
    assert not list(elsewhere.iterdir())


def test_a_turn_servers_own_folder_is_made_private_before_use(tmp_path):
    """Before: an existing folder of the user's kept whatever mode it had (0777 here), so another user
    could add or swap names in it while the server made its socket and page."""
    folder = tmp_path / "sockets"
    folder.mkdir()
    os.chmod(folder, 0o777)
    proc = _started(_server(folder / "g.sock", "0=0"))
    try:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        page = os.lstat(folder / "g.sock.yield")
        assert stat.S_ISREG(page.st_mode) and stat.S_IMODE(page.st_mode) == 0o600
    finally:
        _finish(proc)


def test_the_yield_page_is_created_anew_never_through_a_link(tmp_path):
    """Before: `open(page, "w+b")` (after an unlink that a user with access to the folder could race)
    followed a link and truncated its target."""
    from xover.turns.server import create_page

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    page = tmp_path / "g.sock.yield"
    page.symlink_to(victim)
    with create_page(str(page)) as handle:
        handle.write(b"\0" * 16)
    assert victim.read_bytes() == b"precious"
    assert stat.S_ISREG(os.lstat(page).st_mode) and stat.S_IMODE(os.lstat(page).st_mode) == 0o600


def _listening(path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    return listener


def test_a_worker_never_opens_a_fifo_put_in_place_of_the_yield_page(tmp_path):
    """Before: the worker opened the page by name, following links, and a FIFO there blocked it for ever."""
    from xover.runtime.turn_client import CrossoverToken

    path = tmp_path / "g.sock"
    listener = _listening(path)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "g.sock.yield").symlink_to(tmp_path / "fifo")
    try:
        done, token = _in_thread(lambda: CrossoverToken(str(path), 0, 0), timeout=10)
        assert done, "the worker blocked opening the yield page"
        assert not isinstance(token, BaseException), token
        assert token._page[0] == 0
    finally:
        if not done:  # let the blocked open go
            with open(tmp_path / "fifo", "wb"):
                pass
        listener.close()


def test_a_worker_ignores_a_yield_page_that_is_not_its_own(tmp_path):
    """Before: a page of another user's (full of 'yield now') was mapped and obeyed."""
    _root_only()
    from xover.runtime.turn_client import CrossoverToken

    path = tmp_path / "g.sock"
    listener = _listening(path)
    page = tmp_path / "g.sock.yield"
    page.write_bytes(b"\x01" * 4096)
    os.chown(page, NOBODY, NOBODY)
    try:
        token = CrossoverToken(str(path), 0, 0)
        assert token._page[0] == 0  # not the other user's 1 (slot 0 + 1: "yield")
        token.close()
    finally:
        listener.close()


def test_a_worker_waits_as_long_as_its_partner_computes_but_not_for_a_stopped_server(tmp_path, capfd, monkeypatch):
    """A wait longer than the silence limit while the server is alive goes on (keep-alives every 2 s);
    once the server stops answering (SIGSTOP here: alive but silent), the next wait ends within the
    limit with a clear message. Before: recv() had no limit, and the second wait never ended."""
    from xover.runtime import turn_client

    monkeypatch.setattr(turn_client, "SILENCE_S", 5.0, raising=False)
    path = str(tmp_path / "g.sock")
    proc = _started(_server(path, "0=0,1", extra=["--policy", "round-robin"]))
    try:
        first = turn_client.CrossoverToken(path, 0, 0)
        second = turn_client.CrossoverToken(path, 0, 1)
        waiting = threading.Thread(target=second.acquire, daemon=True)
        waiting.start()
        first.acquire()  # round robin: slot 0 first, once both are ready
        time.sleep(7)  # "computing", longer than the silence limit, while slot 1 waits
        assert waiting.is_alive()
        first.release()
        waiting.join(5)
        assert not waiting.is_alive() and second._sock is not None  # granted, not given up
        again = threading.Thread(target=first.acquire, daemon=True)
        again.start()
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGSTOP)
        second.release()  # the server cannot hand the turn on now
        started = time.monotonic()
        again.join(20)
        assert not again.is_alive(), "the worker waits for ever for a server that stopped"
        assert time.monotonic() - started < 9
        assert first._sock is None  # it goes on without turns
        assert "said nothing for 5 s" in capfd.readouterr().err
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.communicate()


# ---------------------------------------------------------------------------------------------
# 7. Waits without a limit: ssh, the turn server's `ready`, --timeout while a unit starts
# ---------------------------------------------------------------------------------------------

FAKE_SSH = """#!/bin/sh
# an ssh that records how it was called (and what its stdin is), then runs the command here; each line in
# one write: xover calls several hosts at once
line=$(printf '%s' "$*" | tr '\\n' ' '); echo "$line" >> {log}
stdin=$(readlink /proc/self/fd/0); echo "$stdin" >> {log}.stdin
{behaviour}
"""


def _fake_ssh(tmp_path, monkeypatch, behaviour):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "ssh.log"
    (bin_dir / "ssh").write_text(FAKE_SSH.format(log=log, behaviour=behaviour))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log




def test_a_stalled_ssh_fails_the_turn_servers_start_within_its_limit(tmp_path, monkeypatch):
    """Before: the launcher read the server's `ready` with no limit, so an ssh that never answered
    held the run (and --timeout) for ever."""
    from xover.errors import XoverError
    from xover.turns import service

    log = _fake_ssh(tmp_path, monkeypatch, f"echo $$ > {tmp_path}/ssh.pid\nexec sleep 300")
    monkeypatch.setattr(service, "START_TIMEOUT_S", 1.0, raising=False)
    try:
        done, outcome = _in_thread(lambda: service.TurnService("hardening-stall", [{"node9": [0]}, {"node9": [0]}],
                                                               "work-conserving", {}), timeout=30)
        assert done, "starting a turn server through a stalled ssh never ended"
        assert isinstance(outcome, XoverError), outcome
        assert "node9" in str(outcome) and "did not say it was ready within 1 s" in str(outcome)
        assert "ssh node9 true" in str(outcome)
    finally:
        pid = (tmp_path / "ssh.pid").read_text().strip() if (tmp_path / "ssh.pid").exists() else ""
        if pid:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert log.exists()


def test_the_run_deadline_bounds_a_turn_servers_start(tmp_path, monkeypatch):
    """--timeout while a unit starts: given the run's deadline, starting gives up at it with TimedOut
    (xover/run/schedule.py passes `deadline=`; see the report of issue 38)."""
    from xover.run.supervise import TimedOut
    from xover.turns import service

    _fake_ssh(tmp_path, monkeypatch, f"echo $$ > {tmp_path}/ssh.pid\nexec sleep 300")
    try:
        started = time.monotonic()
        done, outcome = _in_thread(lambda: service.TurnService("hardening-deadline", [{"node9": [0]}],
                                                               "work-conserving", {},
                                                               deadline=time.monotonic() + 1.0), timeout=30)
        assert done and isinstance(outcome, TimedOut), outcome
        assert time.monotonic() - started < 15
    finally:
        pid = (tmp_path / "ssh.pid").read_text().strip() if (tmp_path / "ssh.pid").exists() else ""
        if pid:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_every_ssh_xover_starts_has_a_connect_timeout_and_no_terminal_input(tmp_path, monkeypatch):
    """Before: `ssh -o BatchMode=yes` alone, so an unreachable host waited for the system's TCP timeout,
    and the short ssh calls read xover's terminal. Covers the turn server's ssh, torchrun's (port,
    settings, the node's own), and the sweep of a host's leftovers."""
    from xover.run.external.torchrun import torchrun_commands
    from xover.run.supervise import sweep
    from xover.turns.service import TurnService

    behaviour = textwrap.dedent("""\
        case "$*" in
          *O_NOFOLLOW*) cat > /dev/null; echo /tmp/xover-env-fake ;;
          *getsockname*) echo 29500 10.0.0.8 /tmp/xover-rdzv-fake/socket ;;
          *xover.turns.server*) for last; do :; done; exec sh -c "$last" ;;
          *) ;;
        esac""")
    log = _fake_ssh(tmp_path, monkeypatch, behaviour)
    service = TurnService("hardening-ssh", [{"node9": [0]}], "work-conserving", {})
    try:
        node_commands = torchrun_commands(2, "node8:1,node9:1", tmp_path / "logs", tmp_path / "run" / "spec.json",
                                          env={"XOVER_JOB": "x"})
        sweep("XOVER_RUN", ["hardening-nothing-has-this-tag"], ["node9"], [])
    finally:
        service.stop()
    calls = log.read_text().splitlines()
    assert len(calls) >= 5  # turn server, port, settings x2, sweep
    for call in calls:
        assert "ConnectTimeout=" in call and "BatchMode=yes" in call and "ServerAliveInterval=" in call, call
    for command in node_commands:
        assert command[0] == "ssh" and "-tt" in command
        assert any(part.startswith("ConnectTimeout=") for part in command)
    # the short calls read nothing from xover's terminal (the settings go over a pipe, by design)
    stdins = (tmp_path / "ssh.log.stdin").read_text().splitlines()
    assert all(s == "/dev/null" or s.startswith("pipe:") for s in stdins), stdins
    assert stdins.count("/dev/null") >= 2  # the port and the sweep


# ---------------------------------------------------------------------------------------------
# 9. The reaper and pid reuse
# ---------------------------------------------------------------------------------------------

PID_REUSE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from xover.run import supervise

    # A tagged process that ends 0.3 s after SIGTERM; when it is gone, its pid is given to an innocent
    # process (ns_last_pid: the next pid of this private pid namespace), before the reaper's SIGKILL.
    tagged = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                               "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.3), sys.exit(0))); "
                               "time.sleep(60)"], env={**os.environ, "XOVER_EXPERIMENT": "reuse-test"})
    while "reuse-test" not in open(f"/proc/{tagged.pid}/environ", "rb").read().decode(errors="replace"):
        time.sleep(0.01)
    time.sleep(0.2)
    box = {}

    def reuse(*_):
        if tagged.poll() is None or "innocent" in box:
            return
        with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
            handle.write(str(tagged.pid - 1))
        box["innocent"] = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])

    signal.signal(signal.SIGCHLD, reuse)
    supervise.kill_tagged("reuse-test", grace_s=2.0)
    innocent = box.get("innocent")
    if innocent is None or innocent.pid != tagged.pid:
        print("no-reuse", flush=True)
        sys.exit(0)
    time.sleep(0.3)
    print("innocent", "killed" if innocent.poll() is not None else "alive", flush=True)
    innocent.kill()
""")


def test_the_reaper_never_kills_a_process_that_was_given_a_stopped_processs_pid(tmp_path):
    """Before: SIGKILL went to every pid of the first scan, here to the innocent process that got the
    pid after the tagged one ended on SIGTERM. Run in a private pid namespace, where pids are given in
    order and ns_last_pid makes the reuse happen at once."""
    _root_only()
    script = tmp_path / "reuse.py"
    script.write_text(PID_REUSE)
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", PYTHON, str(script)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("unshare is not installed")
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no private pid namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() != "no-reuse", "the test could not give the pid to another process"
    assert done.stdout.strip() == "innocent alive"


def test_the_reaper_still_stops_what_ignores_sigterm():
    from xover.run.supervise import kill_tagged

    proc = subprocess.Popen([PYTHON, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "XOVER_EXPERIMENT": "stubborn-test"})
    assert proc.stdout.readline().strip() == "up"
    assert kill_tagged("stubborn-test", grace_s=0.5) == 1
    assert proc.wait(timeout=5) == -signal.SIGKILL


# ---------------------------------------------------------------------------------------------
# 10. Memory that grew all run
# ---------------------------------------------------------------------------------------------

def test_the_turn_server_streams_first_grants_instead_of_keeping_every_iteration(tmp_path):
    """Before: the server kept every iteration's first grants and sent them as one line at exit."""
    from xover.runtime.turn_client import CrossoverToken

    path = str(tmp_path / "g.sock")
    proc = _started(_server(path, "0=0", "1=0"))
    tokens = [CrossoverToken(path, device, 0) for device in (0, 1)]
    for _ in range(1500):
        for token in tokens:
            token.acquire()
            token.release()
    for token in tokens:
        token.close()
    lines = _finish(proc)
    stats = json.loads(next(line for line in lines if line.startswith("stats ")).removeprefix("stats "))
    assert len(stats["slots"]["0"]["grant_spans"]) <= 16  # the last few (server.SPAN_LAG), not 1500
    streamed = [span for line in lines if line.startswith("spans ") for span in json.loads(line.removeprefix("spans "))]
    iterations = sorted(span[1] for span in streamed) + [span[0] for span in stats["slots"]["0"]["grant_spans"]]
    assert sorted(iterations) == list(range(1, 1501))  # every iteration once, streamed or at the end
    assert all(span[4] == 2 for span in streamed)  # both devices' first grants in each


def test_rank_skews_over_hosts_come_from_streamed_spans():
    from xover.turns.service import GrantSkews

    skews = GrantSkews({0: 2, 1: 1})
    skews.add([[0, i, 10.0 + i, 10.0 + i, 1] for i in range(1, 101)])  # host a
    assert skews.open[0] and not skews.iterations.get(0)  # waiting for host b
    skews.add([[0, i, 10.0 + i + 0.002, 10.0 + i + 0.004, 1] for i in range(1, 101)])  # host b, 2-4 ms later
    skews.add([[1, i, 1.0, 1.0, 1] for i in range(1, 51)])
    assert not skews.open[0]  # every iteration closed and forgotten
    summary = skews.summary(0)
    assert summary["iterations"] == 100 and abs(summary["skew_p50_ms"] - 4.0) < 1e-6
    assert skews.summary(1) == {"skew_p50_ms": None, "skew_p90_ms": None, "skew_max_ms": None, "iterations": 50}


def test_the_skew_sample_stays_bounded(monkeypatch):
    from xover.turns import service

    monkeypatch.setattr(service, "MAX_SKEWS", 64)
    skews = service.GrantSkews({0: 1})
    skews.add([[0, i, 0.0, i / 1000, 2] for i in range(1, 1001)])
    assert len(skews.skews[0]) < 64
    summary = skews.summary(0)
    assert summary["iterations"] == 1000 and summary["skew_max_ms"] == pytest.approx(1000.0)
    assert 400 < summary["skew_p50_ms"] < 600


def test_a_turn_service_reports_every_iteration_of_a_long_run(tmp_path):
    from xover.runtime.turn_client import CrossoverToken
    from xover.turns.service import TurnService

    service = TurnService(f"hardening-{os.getpid()}", [{"localhost": [0, 1]}], "work-conserving", {})
    try:
        path = service.socket_template.replace("{host}", "localhost")
        tokens = [CrossoverToken(path, device, 0) for device in (0, 1)]
        for _ in range(700):
            for token in tokens:
                token.acquire()
                token.release()
        for token in tokens:
            token.close()
    finally:
        service.stop()
    stats = service.slot_statistics()["0"]
    assert stats["iterations"] == 700 and stats["grants"] == 1400 and stats["skew_p50_ms"] is not None


def _relay(command, stdin_fd=None):
    """A LaunchedProcess of `command`, to its end: (its tail, the metric records it relayed)."""
    from xover.run.supervise import LaunchedProcess

    records, ended = [], threading.Event()
    saved = None
    if stdin_fd is not None:  # xover's own stdin, as the launcher would inherit it
        saved = os.dup(0)
        os.dup2(stdin_fd, 0)
    try:
        process = LaunchedProcess(command, dict(os.environ), Path(os.devnull), records.append,
                                  lambda *_: ended.set())
    finally:
        if saved is not None:
            os.dup2(saved, 0)
            os.close(saved)
    assert ended.wait(60)
    return list(process.tail), records


def test_output_without_newlines_is_relayed_in_bounded_lines():
    """A progress bar that redraws with \\r and never prints a newline. Before: the relay kept all of it
    as one growing line (and kept it whole in the failure tail)."""
    program = ("import sys\n"
               "for step in range(200000):\n"
               "    sys.stdout.write(f'\\rtraining {step:6d}/200000 ' + '#' * 20)\n"
               "sys.stdout.write('\\rXOVER-METRIC {\"kind\": \"end\"}\\n')\n"
               "sys.stdout.write('x' * 300000)\n"  # and a line that never ends
               "sys.stdout.flush()\n")
    tail, records = _relay([PYTHON, "-c", program])
    assert records == [{"kind": "end"}]  # a record after a progress bar on the same line is still read
    assert all(len(line) <= 4000 for line in tail)  # supervise.TAIL_LINE_CHARS, and a mark that it was cut
    assert any("training 199999/200000" in line for line in tail)


def test_a_record_a_launcher_relayed_in_parts_around_another_ranks_line_is_read():
    """What torchrun's --tee writes when it reads a rank's line while the rank writes it and another rank's
    line comes before the rest (each write of the launcher's a flush of its own): the record is read, and
    the other rank's line stays whole in the tail."""
    program = ("import sys, time\n"
               "for part in ('[default0]:XOVER-METRIC {\"ki', '[default1]:loader worker 3 started\\n',\n"
               "             '[default0]:nd\": \"end\"}\\n'):\n"
               "    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.05)\n")
    tail, records = _relay([PYTHON, "-c", program])
    assert records == [{"kind": "end"}], tail
    assert tail == ["[default1]:loader worker 3 started"], tail


# ---------------------------------------------------------------------------------------------
# 11. Launchers and xover's terminal
# ---------------------------------------------------------------------------------------------

def test_launchers_do_not_inherit_xovers_standard_input():
    """Before: a launcher (and so `ssh -tt` to another host) read xover's terminal."""
    read, write = os.pipe()
    try:
        tail, _ = _relay([PYTHON, "-c", "import os; print('stdin=' + os.readlink('/proc/self/fd/0'))"],
                         stdin_fd=read)
    finally:
        os.close(read)
        os.close(write)
    assert "stdin=/dev/null" in tail


# ---------------------------------------------------------------------------------------------
# 6. A transient Slurm error
# ---------------------------------------------------------------------------------------------

FAKE_SCONTROL = """#!/bin/sh
# fails the first {failures} time(s) as a busy slurmctld does, then says the job completed
count=$(cat {counter} 2>/dev/null || echo 0)
echo $((count + 1)) > {counter}
if [ "$count" -lt {failures} ]; then
  echo "slurm_load_jobs error: {words}" >&2
  exit 1
fi
echo "JobId=$4 JobName=g JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n1"
"""


def _fake_slurm(tmp_path, monkeypatch, failures, words="Socket timed out on send/recv operation"):
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL.format(failures=failures, counter=tmp_path / "count",
                                                           words=words))
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'cancelled'}\n")
    for name in ("scontrol", "scancel"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path / "cancelled"


class _Console:
    def __init__(self):
        self.lines = []

    def print(self, text, **_):
        self.lines.append(text)


def _follow(monkeypatch, deadline=None):
    from xover.run.batch import Following
    from xover.run.on_slurm import SlurmLauncher

    recorded = []
    monkeypatch.setattr(Following, "record", lambda self, index, state, status=None: recorded.append(state))
    console = _Console()
    following = Following(SlurmLauncher(), None, {0: [], 1: []}, {0: "41", 1: "42"}, console)
    following.follow(deadline, poll_s=0.01)
    return following.ended, recorded, console


def test_one_slurm_query_that_times_out_does_not_end_the_run(tmp_path, monkeypatch):
    """Before: the first `scontrol` error raised out of follow(), and submit_and_follow cancelled every job."""
    cancelled = _fake_slurm(tmp_path, monkeypatch, failures=1)
    states, recorded, console = _follow(monkeypatch)
    assert {index: state.state for index, state in states.items()} == {0: "COMPLETED", 1: "COMPLETED"}
    assert len(recorded) == 2 and not cancelled.exists()
    assert sum("Slurm did not answer" in line for line in console.lines) == 1


def test_a_slurm_controller_that_stays_away_ends_the_run_after_the_bound(tmp_path, monkeypatch):
    from xover.run.external import slurm

    _fake_slurm(tmp_path, monkeypatch, failures=1000, words="Unable to contact slurm controller (connect failure)")
    monkeypatch.setattr(slurm, "TRANSIENT_RETRY_S", 2.5)
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError, match="Unable to contact slurm controller.*did not answer for [0-9]+ s"):
        _follow(monkeypatch)
    assert 1 <= time.monotonic() - started < 10


def test_a_slurm_refusal_is_not_retried(tmp_path, monkeypatch):
    from xover.run.external import slurm

    _fake_slurm(tmp_path, monkeypatch, failures=1000, words="Access/permission denied")
    started = time.monotonic()
    with pytest.raises(slurm.SlurmError, match="permission denied"):
        _follow(monkeypatch)
    assert time.monotonic() - started < 1
    assert (tmp_path / "count").read_text().strip() == "1"


def test_cancelling_retries_a_controller_that_timed_out(tmp_path, monkeypatch):
    from xover.run.external import slurm

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f"""#!/bin/sh
count=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((count + 1)) > {tmp_path}/n
[ "$count" -ge 1 ] || {{ echo "scancel: error: Socket timed out on send/recv operation" >&2; exit 1; }}
""")
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    slurm.cancel("42")
    assert (tmp_path / "n").read_text().strip() == "2"


# ---------------------------------------------------------------------------------------------
# 4. SQLite on a network filesystem
# ---------------------------------------------------------------------------------------------

def _mounts_with(tmp_path, monkeypatch, kind):
    """/proc/mounts as this machine's, plus `kind` mounted at tmp_path/shared (a path with a space)."""
    from xover.store import session

    shared = tmp_path / "shared store"
    shared.mkdir()
    fake = tmp_path / "mounts"
    escaped = str(shared).replace(" ", "\\040")
    fake.write_text(Path("/proc/mounts").read_text() + f"server:/export {escaped} {kind} rw,relatime 0 0\n")
    monkeypatch.setattr(session, "PROC_MOUNTS", str(fake), raising=False)
    return shared


def _journal_mode(store):
    from sqlalchemy import text

    with store.engine.connect() as connection:
        return connection.execute(text("PRAGMA journal_mode")).scalar()


@pytest.mark.parametrize("kind", ["nfs4", "lustre", "cifs", "fuse.sshfs"])
def test_a_store_on_a_network_filesystem_is_warned_of_and_not_in_wal_mode(tmp_path, monkeypatch, capfd, kind):
    """Before: WAL was forced wherever the file was, silently."""
    from xover.store.session import open_store

    shared = _mounts_with(tmp_path, monkeypatch, kind)
    store = open_store(str(shared / "runs" / "xover.db"))
    try:
        assert _journal_mode(store) == "delete"
    finally:
        store.close()
    warning = capfd.readouterr().err
    assert f"network filesystem ({kind} at {shared})" in warning and "PostgreSQL" in warning
    assert len(warning.strip().splitlines()) == 1
    store = open_store(str(shared / "runs" / "xover.db"))  # said once per process and file
    store.close()
    assert "network filesystem" not in capfd.readouterr().err


def test_a_store_on_a_local_filesystem_stays_in_wal_mode(tmp_path, monkeypatch, capfd):
    from xover.store.session import filesystem_of, open_store

    _mounts_with(tmp_path, monkeypatch, "nfs4")
    store = open_store(str(tmp_path / "local.db"))  # beside the network mount, not under it
    try:
        assert _journal_mode(store) == "wal"
    finally:
        store.close()
    assert "network filesystem" not in capfd.readouterr().err
    assert filesystem_of(tmp_path / "shared store" / "not" / "made" / "yet.db")[0] == "nfs4"
    assert filesystem_of(tmp_path / "shared storeX")[0] != "nfs4"  # a prefix of a name is not its folder


def test_the_run_deadline_bounds_torchruns_ssh_calls_and_the_lease_wait(tmp_path, monkeypatch):
    """--timeout while a unit starts (and while --wait waits for a device): the steps take the run's
    deadline and end at it with TimedOut (the call sites in run/schedule.py and run/commands.py pass
    it; see the report of issue 38)."""
    from xover.run.external.torchrun import torchrun_commands
    from xover.run.leases import DeviceLeases
    from xover.run.supervise import TimedOut

    _fake_ssh(tmp_path, monkeypatch, "exec sleep 30")
    started = time.monotonic()
    with pytest.raises(TimedOut):
        torchrun_commands(2, "node8:1,node9:1", tmp_path / "logs", tmp_path / "run" / "spec.json",
                          env={"XOVER_JOB": "x"}, deadline=time.monotonic() + 1.0)
    assert time.monotonic() - started < 10
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path / "leases"))
    holder, waiter = DeviceLeases("holder"), DeviceLeases("waiter")
    holder.acquire([("localhost", 0)], wait=False)
    started = time.monotonic()
    with pytest.raises(TimedOut):
        waiter.acquire([("localhost", 0)], wait=True, poll_s=0.1, deadline=time.monotonic() + 0.5)
    assert time.monotonic() - started < 3
    holder.release()


# ---------------------------------------------------------------------------------------------
# 12. One-rank Horovod jobs on the emulated cluster
# ---------------------------------------------------------------------------------------------

def test_a_horovod_job_on_one_other_host_names_its_interface(monkeypatch):
    """horovodrun probes a single remote host against itself, so loopback counts as routed, and the
    rendezvous address came from a set's first interface: 127.0.0.1 of the launcher in about half the
    runs. Before: no interface was named; one-rank jobs on the emulated cluster failed intermittently."""
    from xover.emulation import cluster
    from xover.run.external import horovodrun as horovod

    monkeypatch.setattr(cluster, "read_state", lambda: {"ready": True, "hosts": [
        {"name": "xo-h1", "address": "10.77.0.1"}, {"name": "xo-h2", "address": "10.77.0.2"}]})
    interfaces = cluster.host_interfaces()  # what `xover run` gives horovodrun_command
    command = horovod.horovodrun_command(1, "xo-h1:1", Path("/tmp/logs"), Path("/tmp/spec.json"), interfaces=interfaces)
    assert command[command.index("--network-interfaces") + 1] == cluster.NIC
    for hosts in ("xo-h1:1,xo-h2:1", "localhost:2"):  # across hosts Horovod's probe works; here, loopback is right
        assert "--network-interfaces" not in horovod.horovodrun_command(2, hosts, Path("/tmp/logs"),
                                                                        Path("/tmp/spec.json"), interfaces=interfaces)


# (six one-rank jobs on the emulated cluster itself: tests/e2e/test_cluster.py)


def test_a_hung_turn_server_on_another_host_is_stopped_with_its_files(tmp_path, monkeypatch):
    """Found by bench/chaos.py's stop-server fault: a remote server that hangs (SIGSTOP) ignores its
    stdin's end, and killing its ssh client left it running there, with its socket and page. Before:
    an orphan on the host after the run."""
    from xover.run.supervise import tagged_processes
    from xover.settings import TURN_SERVER_VARIABLE as TAG_VARIABLE
    from xover.turns.service import TurnService

    behaviour = textwrap.dedent("""\
        case "$*" in
          *xover.turns.server*) for last; do :; done; exec sh -c "$last" ;;
          *xover.run.reaper*) while [ "$1" != node9 ]; do shift; done; shift; exec sh -c "$*" ;;  # as ssh runs its words there
        esac""")
    _fake_ssh(tmp_path, monkeypatch, behaviour)
    name = f"hardening-hung-{os.getpid()}"
    service = TurnService(name, [{"node9": [0]}], "work-conserving", {})
    [server] = service.servers
    [pid] = tagged_processes(name, TAG_VARIABLE)
    os.kill(pid, signal.SIGSTOP)
    try:
        server.stop(timeout_s=1.0)
        time.sleep(0.5)
        assert not tagged_processes(name, TAG_VARIABLE)
        assert not os.path.exists(server.socket) and not os.path.exists(server.socket + ".yield")
    finally:
        for left in tagged_processes(name, TAG_VARIABLE):
            os.kill(left, signal.SIGKILL)
