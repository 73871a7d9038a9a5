"""How an experiment xover ran to its end shows when a job of it did not finish: `scancel` of a Slurm job
left the experiment `finished` in every view of the report (MLflow's parent run FINISHED beside its KILLED
job runs), and `xover run`'s last line said 'makespan 7.2 s measured' where `xover report` said 'not
measured, a job did not finish'."""

import pytest

from xover.plan import Plan
from xover.report.mlflow import STATUS
from xover.results import RunOutcome, RunResult, measured_makespan_s
from xover.run.commands import schedule_summary
from xover.sharing import RunStatus, experiment_status


@pytest.mark.parametrize(("runs", "shown"), [
    (["cancelled", "cancelled"], "cancelled"),  # scancel while both jobs ran: none finished
    (["finished", "cancelled"], "cancelled"),  # one group finished, the other's job was cancelled
    ([RunStatus.CANCELLED, RunStatus.STOPPED], "cancelled"),  # as the store's enum, not only its text
    (["timeout", "finished"], "timeout"),  # a scheduler's time limit (Slurm TIMEOUT, DEADLINE)
    (["cancelled", "failed"], "failed"),  # a failed job says more than a cancelled one
    (["cancelled", "timeout"], "timeout"),
    (["finished", "stopped"], "finished"),  # stopped: it only shared the devices of a job that ended its unit
    (["finished", "finished"], "finished"),
    ([], "finished"),
])
def test_a_finished_experiment_shows_how_its_runs_ended(runs, shown):
    assert experiment_status("finished", runs) == shown


@pytest.mark.parametrize("stored", ["interrupted", "timeout", "failed", "lost", "running"])
def test_a_status_xover_stored_for_its_own_stop_stays(stored):
    assert experiment_status(stored, ["cancelled", "failed"]) == stored


def test_every_shown_experiment_status_is_of_the_vocabulary_and_a_cancelled_one_is_killed_in_mlflow():
    for status in RunStatus:
        if status.ended:
            assert experiment_status("finished", [status.value]) in {s.value for s in RunStatus}
            assert experiment_status("finished", [status.value]) in STATUS
    assert STATUS[experiment_status("finished", ["cancelled", "cancelled"])] == "KILLED"


def _job(name: str, status: str, start: str | None, end: str | None) -> RunResult:
    return RunResult(name=name, group=0, status=status, started_at=start and f"2026-12-07 00:00:{start}",
                     ended_at=end and f"2026-12-07 00:00:{end}")


def test_a_makespan_only_where_every_job_finished():
    assert measured_makespan_s([]) is None
    both = [_job("a", "finished", "01", "05"), _job("b", "finished", "02", "08.5")]
    schedule = schedule_summary(both, Plan(algo="none", hosts=[], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                                           predicted_makespan_ms=1, sequential_makespan_ms=1))
    assert schedule["measured_makespan_s"] == pytest.approx(7.5)
    for other in (_job("b", "cancelled", "02", "08.5"), _job("b", "failed", "02", None),
                  _job("b", "cancelled", None, "08.5")):
        plan = Plan(algo="none", hosts=[], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                    predicted_makespan_ms=1, sequential_makespan_ms=1)
        assert schedule_summary([both[0], other], plan)["measured_makespan_s"] is None


def test_the_end_of_run_line_says_no_makespan_where_a_job_was_cancelled(capsys):
    from xover.links import HOST
    from xover.views import show_run

    plan = Plan(algo="none", hosts=[], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                predicted_makespan_ms=29_400, sequential_makespan_ms=33_600)
    jobs = [_job("a", "cancelled", "01", "08.2"), _job("b", "cancelled", "01", "08.2")]
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["planned"], policies=[], jobs=[],
                        groups=[], schedule=schedule_summary(jobs, plan)), as_json=False)
    shown = " ".join(capsys.readouterr().out.split())
    assert "makespan: not measured, a job did not finish; up to 1 group ran at once" in shown, shown
    assert "s measured" not in shown, shown
