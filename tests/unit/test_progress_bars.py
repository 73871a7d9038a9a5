"""The live bars (xover/console.py): a job that ended short of its bar's total stops its clock."""

import io
import time

from rich.console import Console

from xover.console import LoggedProgress, ProgressBars


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


def _logged_bars(terminal: bool) -> tuple[ProgressBars, io.StringIO]:
    out = io.StringIO()
    bars = ProgressBars()
    bars.progress.live.console = Console(file=out, force_terminal=terminal, width=120)
    bars.logged = LoggedProgress(bars.progress, every_s=0.05)
    return bars, out


def test_where_stderr_is_a_log_the_bars_are_written_as_they_stand_now_and_then():
    """Rich draws its bars once, at their stop, where stderr is not a terminal: a run said nothing in its log
    (a Slurm job's output, CI) until its end. There they are written every LOGGED_EVERY_S."""
    bars, out = _logged_bars(terminal=False)
    bars.start()
    bars.job_started(1, "mlp-digits [crossover]", total=100)
    bars.job_progress(1, 1, 2.5)  # the clock starts
    assert out.getvalue() == ""
    time.sleep(0.06)
    bars.job_progress(1, 40, 1.25)
    bars.job_progress(1, 41, 1.125)  # not yet again
    assert out.getvalue().count("mlp-digits [crossover]") == 1
    assert "40/100" in out.getvalue() and "loss 1.2500" in out.getvalue()
    time.sleep(0.06)
    bars.job_progress(1, 60, 1.0)
    assert out.getvalue().count("mlp-digits [crossover]") == 2 and "60/100" in out.getvalue()


def test_on_a_terminal_the_live_bars_are_not_written_again():
    bars, out = _logged_bars(terminal=True)
    bars.logged.progress.console.file = io.StringIO()  # the live display's own drawing is not what is counted
    bars.logged.tick()
    time.sleep(0.06)
    bars.logged.tick()
    assert bars.logged.since is None and out.getvalue() == ""
