"""Teardown never signals a pid that is no longer the launcher's (issue 52, finding 5)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from xover.run.supervise import LaunchedProcess, kill_tree


def _launched(tmp_path, command: list[str]) -> tuple[LaunchedProcess, list[int]]:
    ended: list[int] = []
    launched = LaunchedProcess(command, {"PATH": "/usr/bin:/bin"}, tmp_path / "launcher.log", lambda record: None,
                               lambda process, code: ended.append(code))
    return launched, ended


def test_a_reaped_launchers_pid_is_not_signalled_when_another_process_has_it(tmp_path):
    """Before: stop() was kill_tree(self.process.pid), so that a launcher reaped already, whose pid the
    kernel had given to another process, had that process (and its children) killed."""
    launched, ended = _launched(tmp_path, ["true"])
    deadline = time.monotonic() + 20
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended == [0]
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        launched.process.pid = stranger.pid  # the kernel gave the reaped launcher's pid to someone else
        launched.stop()
        time.sleep(0.2)
        assert stranger.poll() is None, "a process that reused the launcher's pid was killed"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_running_launcher_and_its_children_are_still_stopped(tmp_path):
    launched, ended = _launched(tmp_path, ["sh", "-c", "sleep 30 & sleep 30; wait"])
    time.sleep(0.3)
    children = psutil.Process(launched.process.pid).children(recursive=True)
    assert children
    launched.stop()
    deadline = time.monotonic() + 20
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended and not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in children)


def test_kill_tree_with_a_process_taken_before_its_pid_was_reused_signals_nothing(tmp_path):
    first = subprocess.Popen(["sleep", "30"])
    taken = psutil.Process(first.pid)
    first.kill()
    first.wait()
    kill_tree(taken)  # gone: nothing to signal, no error
