"""Inside a Slurm job, what runs on the other nodes is stopped first, at once (issue 52, finding 14)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from xover.run.supervise import Interrupted, interruptible, on_interrupt


def test_an_interrupt_starts_its_hooks_before_the_clean_up():
    """Before: nothing ran until the orderly clean-up (its ssh calls can outlast Slurm's KillWait, whose
    SIGKILL then leaves what runs on other nodes)."""
    started = threading.Event()
    seen_in_clean_up = []
    with pytest.raises(Interrupted):
        with interruptible(), on_interrupt(started.set):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                seen_in_clean_up.append(started.wait(2))
    assert seen_in_clean_up == [True]


def test_the_other_nodes_are_swept_in_parallel_within_a_bound(tmp_path, monkeypatch):
    from xover.processes import sweep_hosts_now

    (tmp_path / "ssh").write_text('#!/bin/sh\necho "$*" >> "$0.calls"\nsleep 2\n')
    (tmp_path / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    started = time.monotonic()
    sweep_hosts_now("XOVER_EXPERIMENT", "e-52", ["n1", "n2", "n3", "n4"], [], timeout_s=10)
    assert time.monotonic() - started < 5  # four hosts of 2 s each, at once
    calls = (tmp_path / "ssh.calls").read_text().splitlines()
    assert len(calls) == 4 and all("xover.run.reaper --kill e-52 --variable XOVER_EXPERIMENT" in c for c in calls)
