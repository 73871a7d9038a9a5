"""Ctrl-C or SIGTERM raises Interrupted in the main thread wherever it is (run/supervise.py): inside a store
write or a metric sink as well. It must reach the run's clean-up as Interrupted, which then ends the runs
as interrupted (or, inside a Slurm job, as Slurm ended them); nothing on the way may take it for a failure
of its own. Before: SQLAlchemy wrapped it into a StatementError when it landed as a cursor was made, and
a scancel or a Slurm time limit was recorded as a failed run (seen twice in one `make test`)."""

import pytest
from sqlalchemy import text
from sqlalchemy.engine.default import DefaultExecutionContext

from xover.errors import Interrupted
from xover.run.sinks import MetricSink, deliver
from xover.store.session import open_store


def test_an_interrupt_that_lands_in_a_store_write_stays_an_interrupt(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "x.db"))

    def signal_arrives(self):
        raise Interrupted()

    monkeypatch.setattr(DefaultExecutionContext, "create_cursor", signal_arrives)
    with pytest.raises(Interrupted), store.session() as session:
        session.execute(text("SELECT 1"))


class _Sink(MetricSink):
    name = "watcher"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def opened(self, experiment_id: str) -> None:
        raise self.error


def test_an_interrupt_that_lands_in_a_metric_sink_is_not_taken_for_the_sinks_failure(capsys):
    with pytest.raises(Interrupted):
        deliver([_Sink(Interrupted())], lambda sink: sink.opened("e1"))
    # a sink's own failure is still said and left out, and the run goes on
    assert deliver([_Sink(RuntimeError("broken"))], lambda sink: sink.opened("e1")) == []
    assert "the watcher metric sink failed" in capsys.readouterr().err
