"""A failed job is summarised from the rank that failed first (issue 11)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

XOVER = [sys.executable, "-m", "xover"]
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_a_failure_is_summarised_from_the_rank_that_failed_first(tmp_path):
    from xover.run.record import failure_summary

    first, second = tmp_path / "ranks" / "rank.2", tmp_path / "ranks" / "rank.10"
    for folder in (first, second):
        folder.mkdir(parents=True)
    (first / "stderr").write_text("Traceback (most recent call last):\nValueError: the cause\n")
    (second / "stderr").write_text("Traceback (most recent call last):\nRuntimeError: Gloo connection closed\n")
    os.utime(first / "stderr", (1_000_000, 1_000_000))  # written first; rank.10 sorts first by name
    summary = failure_summary(tmp_path, ["launcher line"])
    assert summary.startswith("rank 2:") and "the cause" in summary


def test_one_ranks_failure_is_summarised_from_its_relayed_stderr(tmp_path):
    """One rank under horovodrun keeps no rank logs: its error came relayed, and the summary was
    horovodrun's own last lines (its "exited with non-zero status"), not the rank's error."""
    from xover.run.record import failure_summary

    relayed = ["[1,0]<stdout>:XOVER-METRIC {}", "[1,0]<stderr>:Traceback (most recent call last):",
               "[1,0]<stderr>:RuntimeError: Overflow when unpacking long",
               "Primary job  terminated normally, but 1 process returned", "a non-zero exit code."]
    (tmp_path / "launcher.log").write_text("\n".join(relayed) + "\n")
    summary = failure_summary(tmp_path, relayed[-2:])
    assert summary == "rank 0:\nTraceback (most recent call last):\nRuntimeError: Overflow when unpacking long"


def test_a_scripts_usage_error_is_the_summary_not_the_launchers_lines(tmp_path):
    """argparse's error (no traceback, no 'Error') left torchrun's 'Root Cause (first observed failure)' said
    in its place: a script given an argument it does not take, as when one `-- ARGS` goes to every script."""
    from xover.report.tables import failure_reason
    from xover.run.record import failure_summary

    rank = tmp_path / "ranks" / "run_x" / "attempt_0" / "1"
    rank.mkdir(parents=True)
    (rank / "stderr.log").write_text("usage: train.py [-h] [--steps STEPS]\n"
                                     "train.py: error: unrecognized arguments: --out /tmp/o\n")
    launcher = ["Root Cause (first observed failure):", "[0]:", "  exitcode  : 2 (pid: 30951)", "====="]
    summary = failure_summary(tmp_path, launcher)
    assert summary.startswith("rank 1:") and "unrecognized arguments: --out" in summary
    assert failure_reason(summary) == "rank 1: train.py: error: unrecognized arguments: --out /tmp/o"
    # relayed by horovodrun (one rank: no rank logs)
    relayed = ["[0]<stderr>:usage: train.py [-h]", "[0]<stderr>:train.py: error: unrecognized arguments: --out",
               "Primary job  terminated normally, but 1 process returned", "a non-zero exit code."]
    (tmp_path / "launcher.log").write_text("\n".join(relayed) + "\n")
    (rank / "stderr.log").unlink()
    assert failure_summary(tmp_path, relayed[-2:]).endswith("train.py: error: unrecognized arguments: --out")


def test_scripts_given_one_set_of_arguments_are_told_to_use_job_files_when_one_refuses_them():
    from xover.run.targets import shared_arguments_hint

    usage = "rank 0:\nusage: b.py [-h]\nb.py: error: unrecognized arguments: --steps 5"
    hint = shared_arguments_hint(["a.py", "b.py"], ["--steps", "5"], [None, usage])
    assert hint is not None and "job file each" in hint and "`--`" in hint
    # not where the arguments were not shared, nor for another failure, nor with one script (or two copies)
    assert shared_arguments_hint(["a.py", "b.py"], [], [usage]) is None
    assert shared_arguments_hint(["a.py", "b.py"], ["--steps", "5"], ["rank 0:\nRuntimeError: boom"]) is None
    assert shared_arguments_hint(["b.py", "b.py"], ["--steps", "5"], [usage]) is None


def test_a_rank_that_exits_with_a_code_and_no_traceback_is_named_with_its_code(tmp_path):
    """sys.exit(3) after training: no rank log says why, and torchrun's summary ends in a rule of '=': that
    rule was the reason shown ('exit3 (sequential) failed: =====...')."""
    from xover.run.record import failure_reason, failure_summary

    launcher = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01_04:41:43",
                "  host      : localhost", "  rank      : 1 (local_rank: 1)", "  exitcode  : 3 (pid: 30137)",
                "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/docs/stable/"
                "elastic/errors.html", "=" * 60]
    assert failure_reason(failure_summary(tmp_path, launcher)) == "rank 1: exited with code 3, no traceback"
