"""The live bars (xover/console.py): a job that ended short of its bar's total stops its clock."""

import time

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
