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
