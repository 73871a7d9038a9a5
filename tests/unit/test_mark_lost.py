"""An experiment whose xover is gone: its active runs are marked lost, and a run's own error is kept,
with the reason after it."""

from xover.run.record import mark_lost
from xover.store.models import Experiment, Run


def test_a_lost_runs_error_keeps_what_it_said_and_adds_why_apart():
    experiment = Experiment(id="e1", kind="run", command="xover run", status="running")
    said = Run(status="running", error="rank 1 said: out of memory")
    silent = Run(status="pending")
    done = Run(status="finished", error=None)
    experiment.runs = [said, silent, done]
    mark_lost(None, experiment)
    why = "the xover process that ran it ended without closing it (killed?)"
    assert experiment.status == "lost" and experiment.ended_at is not None
    assert said.status == "lost" and said.error == f"rank 1 said: out of memory; {why}"
    assert silent.status == "lost" and silent.error == why
    assert done.status == "finished" and done.error is None
