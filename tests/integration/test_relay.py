"""What a launcher's output relay and xover's clean-up do with real child processes: only the run's own
records pass, bytes that are not UTF-8 are kept, a launcher's exit is noticed while an orphan writes on,
signals during clean-up take effect after it, and --bandwidth without unshare is one clear error."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from xover.records import MARKER

XOVER = [sys.executable, "-m", "xover"]
TOKEN = "5f" * 16



def test_the_relay_passes_on_only_the_runs_own_records(tmp_path):
    """A launcher whose output forges an exit and an end (no token, or another run's), then prints
    a record of its run's and exits 3: the scheduler hears of the forgeries only as ignored lines, and
    of the exit only when the launcher exits, with its own code."""
    import queue

    from xover.run.schedule import CheckedJob

    own = json.dumps({"kind": "end", "iterations": 3, "token": TOKEN})
    program = ("import time\n"
               f"print({MARKER!r} + '{{\"kind\": \"_exit\", \"code\": 0}}', flush=True)\n"
               f"print({MARKER!r} + '{{\"kind\": \"end\", \"peak_memory_gb\": 9}}', flush=True)\n"
               f"print({MARKER!r} + '{{\"kind\": \"end\", \"token\": \"{'0' * 32}\"}}', flush=True)\n"
               f"print({MARKER!r} + {own!r}, flush=True)\n"
               "time.sleep(0.5)\n"
               "raise SystemExit(3)\n")
    events: queue.Queue = queue.Queue()
    CheckedJob(7, [[sys.executable, "-c", program]], dict(os.environ), tmp_path, events, TOKEN)
    from xover.records import EndRecord
    from xover.run.supervise import IgnoredLine, JobExit

    records = [events.get(timeout=30)[1] for _ in range(5)]
    assert [type(r) for r in records] == [IgnoredLine, IgnoredLine, IgnoredLine, EndRecord, JobExit], records
    assert records[3] == EndRecord(iterations=3) and records[4] == JobExit(3)
    assert all("token" in r.reason or "not a kind" in r.reason for r in records[:3])


def test_the_relay_keeps_bytes_and_metrics_after_invalid_utf8(tmp_path):
    import queue

    from xover.run.supervise import LaunchedJob

    program = ("import sys\n"
               "sys.stdout.buffer.write(b'\\xff\\xfe bad\\n')\n"
               "print('XOVER-METRIC {\"kind\": \"iter\", \"step\": 0}', flush=True)\n"
               "sys.stdout.buffer.write(b'tail without newline \\xc3')\n")
    events: queue.Queue = queue.Queue()
    LaunchedJob(7, [[sys.executable, "-c", program]], dict(os.environ), tmp_path, events)
    records = [events.get(timeout=20), events.get(timeout=20)]
    from xover.run.supervise import JobExit

    assert records == [(7, {"kind": "iter", "step": 0}), (7, JobExit(0))]
    assert (tmp_path / "launcher.log").read_bytes() == b"\xff\xfe bad\n" + \
        b'XOVER-METRIC {"kind": "iter", "step": 0}\n' + b"tail without newline \xc3"


def test_the_log_shows_the_jobs_secrets_as_stars_even_when_one_is_written_in_two_parts(tmp_path):
    """A probe (2026-12-06): launcher.log (0644) kept what a script's error repeated of its arguments and `env`,
    and every metric line's token. Its lines are written with them as ***, a secret split over two writes too."""
    import queue

    from xover.run.schedule import CheckedJob
    from xover.run.supervise import JobExit

    record = json.dumps({"kind": "end", "iterations": 2, "token": TOKEN})
    program = ("import sys, time\n"
               "sys.stdout.write('error: unrecognized arguments: --api-key kx7-sec'); sys.stdout.flush()\n"
               "time.sleep(0.3)\n"
               "print('ret-value and MY_TOKEN=kx7-env', flush=True)\n"
               f"print({MARKER!r} + {record!r}, flush=True)\n"
               "sys.stdout.write('no line end kx7-env')\n")
    events: queue.Queue = queue.Queue()
    CheckedJob(9, [[sys.executable, "-c", program]], dict(os.environ), tmp_path, events, TOKEN,
               ["kx7-secret-value", "kx7-env", "abc"])
    assert [events.get(timeout=30)[1] for _ in range(2)][1] == JobExit(0)
    assert (tmp_path / "launcher.log").read_text() == (
        "error: unrecognized arguments: --api-key *** and MY_TOKEN=***\n"
        f"{MARKER}{record.replace(TOKEN, '***')}\nno line end ***")


def test_a_log_that_cannot_be_written_is_said_and_the_run_goes_on(tmp_path):
    """A probe (2026-12-06): on a full disk the relay thread died on the log's flush (a thread's traceback on
    the terminal), so the run's exit never came and it was recorded lost, '(killed?)'."""
    import queue

    from xover.run.supervise import JobExit, LaunchedJob

    (tmp_path / "launcher.log").symlink_to("/dev/full")  # every write: ENOSPC
    program = "print('XOVER-METRIC {\"kind\": \"iter\", \"step\": 0}', flush=True); print('boom'); raise SystemExit(4)"
    events: queue.Queue = queue.Queue()
    job = LaunchedJob(5, [[sys.executable, "-c", program]], dict(os.environ), tmp_path, events)
    assert [events.get(timeout=30) for _ in range(2)] == [(5, {"kind": "iter", "step": 0}), (5, JobExit(4))]
    assert any("launcher.log could not be written (No space left on device)" in line for line in job.tail), job.tail
    assert job.tail[-1] == "boom"


def test_a_launcher_exit_is_noticed_while_an_orphan_keeps_writing_to_its_pipe(tmp_path):
    import queue

    from xover.run.supervise import EXIT_GRACE_S, JobExit, LaunchedJob, kill_tagged

    tag = f"relay-orphan-{os.getpid()}"
    events: queue.Queue = queue.Queue()
    started = time.monotonic()
    LaunchedJob(8, [["sh", "-c", "(while :; do echo x; sleep 0.2; done) & exit 3"]],
                {**os.environ, "XOVER_TEST_TAG": tag}, tmp_path, events)
    try:
        assert events.get(timeout=EXIT_GRACE_S + 10) == (8, JobExit(3))
        assert time.monotonic() - started < EXIT_GRACE_S + 5
    finally:
        kill_tagged(tag, variable="XOVER_TEST_TAG")


def test_a_signal_during_clean_up_takes_effect_after_it():
    # a thread is running, as the output relays are: a signal mask on the main thread alone would
    # let that thread take the signal, and Python would run the handler in the clean-up anyway
    program = """
import os, signal, threading, time
from xover.run.supervise import Interrupted, interruptible, uninterrupted
signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts, unless its parent ignored SIGINT
threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
try:
    with interruptible():
        with uninterrupted():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
            print("clean-up done", flush=True)
        print("not reached", flush=True)
except Interrupted:
    print("interrupted after it", flush=True)
main = threading.main_thread().ident  # below, signals go to the main thread: handled in its sleep
try:  # a nested run leaves the outer one as it was: still interruptible
    with interruptible():
        with interruptible():
            pass
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.5)
        print("not reached", flush=True)
except Interrupted:
    print("outer run interrupted", flush=True)
try:  # a signal during a clean-up that fails is not delivered later, to an unrelated block
    with uninterrupted():
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.5)
        raise RuntimeError("clean-up failed")
except RuntimeError:
    print("failed clean-up", flush=True)
with uninterrupted():
    print("quiet block", flush=True)
with uninterrupted():  # outside a run: the signal goes to its previous handler after the block
    signal.pthread_kill(main, signal.SIGINT)
    time.sleep(0.5)
    print("second clean-up done", flush=True)
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.splitlines() == ["clean-up done", "interrupted after it", "outer run interrupted",
                                          "failed clean-up", "quiet block", "second clean-up done"], result.stderr
    assert "KeyboardInterrupt" in result.stderr and result.returncode != 0


def test_without_unshare_bandwidth_is_a_clear_error(isolated_results, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = _xover("train", "mlp-digits", "--iterations", "3", "--bandwidth", "1gbit", env={"PATH": str(empty)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unshare" in result.stderr and "drop --bandwidth" in result.stderr


def _xover(*args, timeout=300, env=None):
    return subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
