"""An experiment whose xover is gone: its active runs are marked lost, and a run's own error is kept,
with the reason after it."""

import pytest
from conftest import recorded_runs

from xover.run.record import mark_lost
from xover.store.models import Experiment, Run


def test_a_lost_runs_error_keeps_what_it_said_and_adds_why_apart():
    experiment = Experiment(id="e1", kind="run", command="xover run", status="running")
    said = Run(status="running", error="rank 1 said: out of memory")
    silent = Run(status="pending")
    done = Run(status="finished", error=None)
    experiment.runs = [said, silent, done]
    mark_lost(None, experiment)
    why = "the xover process that ran it ended without closing it (killed? or its store was full?)"
    assert experiment.status == "lost" and experiment.ended_at is not None
    assert said.status == "lost" and said.error == f"rank 1 said: out of memory; {why}"
    assert silent.status == "lost" and silent.error == why
    assert done.status == "finished" and done.error is None


@pytest.mark.parametrize("status, left_as", [("timeout", "timeout"), ("interrupted", "interrupted"),
                                             ("failed", "failed"), ("finished", "failed")])
def test_an_experiment_closed_ends_the_runs_it_left_active_as_it_ended(tmp_path, status, left_as):
    """Before: a run left pending when `--timeout` stopped the experiment was recorded failed."""
    store, recorder, _ = recorded_runs(tmp_path, [
        {"name": name, "mode": "sequential", "hosts": "localhost:1", "np": 1, "status": run_status}
        for name, run_status in (("left", "pending"), ("ran", "running"), ("done", "finished"))])
    recorder.finish(status)
    with store.session() as session:
        ended = {run.name: run.status for run in session.query(Run)}
        assert session.get_one(Experiment, "e1").status == status
    assert ended == {"left": left_as, "ran": left_as, "done": "finished"}


def test_the_runs_an_experiment_closed_with_a_reason_left_active_say_it(tmp_path):
    """A run the store's failure stopped (a full disk), closed where the store still took it, said "failed: no error
    recorded" in `report`: the experiment's end now gives the runs it closes why."""
    store, recorder, _ = recorded_runs(tmp_path, [
        {"name": name, "mode": "sequential", "hosts": "localhost:1", "np": 1, "status": run_status}
        for name, run_status in (("ran", "running"), ("done", "finished"))])
    why = "xover stopped it: the store failed during the run: database or disk is full"
    recorder.finish("failed", why)
    with store.session() as session:
        ended = {run.name: (run.status, run.error) for run in session.query(Run)}
    assert ended == {"ran": ("failed", why), "done": ("finished", None)}
