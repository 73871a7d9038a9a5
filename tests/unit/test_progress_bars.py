"""The live bars (xover/console.py): a job that ended short of its bar's total stops its clock."""

import io
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from xover import console as console_module
from xover.console import ProgressBars


def test_a_finished_jobs_clock_stops_even_short_of_its_total():
    bars = ProgressBars()
    bars.job_started(1, "ddp-digits [concurrent]", total=1909)  # the script's own count; xover stops it at 1000
    bars.job_progress(1, 1000, 0.0005)
    bars.job_finished(1, "finished")
    task = bars.progress.tasks[0]
    elapsed = task.elapsed
    time.sleep(0.05)
    assert task.elapsed == elapsed and task.fields["status"] == "finished"
    assert (task.completed, task.total) == (1000, 1000)  # a full bar: it ended on its own count


def test_a_job_that_failed_or_was_stopped_short_keeps_its_total():
    bars = ProgressBars()
    for run_id, status in ((1, "failed"), (2, "timeout"), (3, "stopped")):
        bars.job_started(run_id, f"job{run_id}", total=200)
        bars.job_progress(run_id, 50, 1.0)
        bars.job_finished(run_id, status)
    assert [(task.completed, task.total) for task in bars.progress.tasks] == [(50, 200)] * 3


def test_a_job_that_failed_before_it_started_is_named_not_numbered():
    """A script that failed on its arguments never sent its start: its bar read "3" (its run's id)."""
    bars = ProgressBars()
    bars.job_finished(3, "failed", "noargs [profile]")
    assert bars.progress.tasks[0].description == "noargs [profile]"


class _TerminalFile(io.StringIO):
    def isatty(self) -> bool:
        return True


def _logged_bars(terminal: bool) -> tuple[ProgressBars, io.StringIO]:
    out = _TerminalFile() if terminal else io.StringIO()
    bars = ProgressBars()
    bars.progress.live.console = Console(file=out, force_terminal=terminal, width=120)
    return bars, out


def test_where_stderr_is_a_log_each_bar_is_a_line_when_it_starts_ends_or_moved_a_while(monkeypatch):
    """Where stderr is not a terminal, rich drew the bars only at their stop (a Slurm job's output, CI said nothing
    until the end), and then every bar was written again as it stood every LOGGED_EVERY_S, finished ones too."""
    monkeypatch.setattr(console_module, "LOGGED_EVERY_S", 0.05)
    bars, out = _logged_bars(terminal=False)
    bars.start()
    bars.job_started(1, "mlp-digits [crossover]", total=100)
    bars.job_started(2, "mlp-digits [concurrent]", total=100)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "0/100" in lines[0] and lines[0].rstrip().endswith("running 0:00:00")
    bars.job_progress(1, 40, 1.25)
    bars.job_progress(1, 41, 1.125)
    assert len(out.getvalue().splitlines()) == 2  # not yet due
    time.sleep(0.06)
    bars.job_progress(1, 60, 1.0)  # due: the bar that moved, not the one that did not
    [moved] = out.getvalue().splitlines()[2:]
    assert "mlp-digits [crossover]" in moved and "60/100" in moved and "loss 1.0000" in moved
    bars.job_finished(1, "failed")
    bars.job_finished(2, "stopped")
    bars.stop()
    ended = out.getvalue().splitlines()[3:]
    assert len(ended) == 2 and "60/100" in ended[0] and "failed" in ended[0] and "stopped" in ended[1]
    assert "\x1b[" not in out.getvalue()  # nothing redrawn


def test_on_a_terminal_the_bars_are_drawn_live_and_never_written_as_lines(monkeypatch):
    monkeypatch.setattr(console_module, "LOGGED_EVERY_S", 0.0)
    bars, out = _logged_bars(terminal=True)
    bars.start()
    bars.job_started(1, "mlp-digits [crossover]", total=100)
    assert bars.progress.live.is_started
    bars.job_progress(1, 50, 1.0)
    bars.job_finished(1, "finished")
    bars.stop()
    assert bars.logged.as_lines is False and bars.logged.written == {} and not bars.progress.live.is_started
    assert "\x1b[2K" in out.getvalue()  # redrawn in place, as rich draws on a terminal

ROOT = Path(__file__).resolve().parents[2]
# a real `xover simulate` whose clock reads half a minute later at each look: every update is as due as in a run of
# hours, in the two seconds this one takes
HOURS_IN_SECONDS = """
import itertools, sys
from xover import console
class Clock:
    looks = itertools.count()
    def monotonic(self):
        return next(self.looks) * 31.0
console.time = Clock()
from xover.__main__ import main
main()
"""
CURSOR_MOVED = re.compile(r"\x1b\[[0-9;?]*[A-HJKSTlh]")  # up, erase a line, hide the cursor: a redraw, not a colour


@pytest.mark.parametrize("environment", [{}, {"FORCE_COLOR": "1"}], ids=["plain", "FORCE_COLOR"])
def test_progress_on_a_stderr_that_is_a_file_is_lines_none_repeated(tmp_path, environment):
    """Where stderr was a file (`2>log`, CI), every bar was written again as it stood every 30 s, finished ones too,
    and once more at the end: a long replay's log was full of the same blocks. Under FORCE_COLOR (a CI's colours)
    rich redrew the bars in place with cursor moves. Each bar's line is now written when it moved, never twice."""
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-c", HOURS_IN_SECONDS, "--db", str(tmp_path / "x.db"), "simulate",
             str(ROOT / "tests" / "assets" / "replay" / "muri_two.csv"), "--cluster", "1x1"],
            cwd=ROOT, env={**os.environ, **environment, "XOVER_RESULTS": str(tmp_path)}, stdout=subprocess.PIPE,
            stderr=stderr, text=True, timeout=300,
        )  # fmt: skip
    written = log.read_text()
    assert done.returncode == 0, written
    assert "xover simulate" in done.stdout and "stored as experiment" in done.stdout
    assert not CURSOR_MOVED.search(written), repr(written)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in written.splitlines() if line.strip()]
    assert [line for line, count in Counter(lines).items() if count > 1] == [], written
    for bar, total in (("fifo", 2), ("srtf", 2), ("tiresias", 2), ("xover", 2), ("storing", 8)):
        full = [line for line in lines if line.split()[0] == bar and f" {total}/{total} " in line]
        assert len(full) == 1, written  # its end, once
