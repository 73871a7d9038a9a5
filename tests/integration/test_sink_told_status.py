"""A run's metric sinks are told, as it closes, the status the report shows for its experiment: where a job
failed, `failed`, not `finished` (the experiment's row says `finished` once xover ran it to its end)."""

import pytest

from xover.errors import Interrupted
from xover.links import HOST
from xover.run.experiment import experiment
from xover.run.sinks import MetricSink
from xover.sharing import RunStatus
from xover.store.models import RecipeSnapshot, Run
from xover.store.session import open_store


class Told(MetricSink):
    name = "told"

    def __init__(self) -> None:
        self.status: str | None = None

    def closed(self, status: str) -> None:
        self.status = status


@pytest.mark.parametrize(("ended", "told"), [(["finished", "failed"], "failed"), (["finished", "stopped"], "finished"),
                                             (["cancelled", "finished"], "cancelled")])
def test_a_sink_is_told_how_the_runs_ended(isolated_results, ended, told):
    store = open_store(str(isolated_results / "x.db"))
    sink = Told()
    with experiment(store, "run", "xover run", HOST, [sink]) as running:
        with store.session() as session, session.begin():
            snapshot = RecipeSnapshot(hash="h", name="a", path="a.toml", body={})
            session.add(snapshot)
            session.flush()
            session.add_all(Run(experiment_id=running.id, recipe_id=snapshot.id, name=f"job{index}",
                                mode="crossover", hosts="localhost:1", np=1,
                                status=status) for index, status in enumerate(ended))
    assert sink.status == told
    store.close()


def test_a_sink_is_told_an_interrupted_experiment_as_it_was_stored(isolated_results):
    store = open_store(str(isolated_results / "x.db"))
    sink = Told()
    with pytest.raises(Interrupted), experiment(store, "run", "xover run", HOST, [sink]):
        raise KeyboardInterrupt
    assert sink.status == RunStatus.INTERRUPTED
    store.close()


def test_a_run_stopped_before_any_run_started_keeps_no_experiment_to_be_report_latest(isolated_results):
    """Ctrl-C or --timeout while a run waited for its devices (--wait) kept an experiment of no jobs: `report latest`
    showed it, not the run that held the devices, and its line said 'the runs: ;'."""
    from sqlalchemy import select

    from xover.store.models import Experiment

    store = open_store(str(isolated_results / "x.db"))
    with pytest.raises(Interrupted) as stopped, experiment(store, "run", "xover run", HOST, []) as waited:
        raise KeyboardInterrupt
    assert str(stopped.value) == "stopped before any run started (waiting for its devices?): nothing was kept"
    assert not waited.results_dir.exists()
    with pytest.raises(Interrupted) as stopped, experiment(store, "run", "xover run", HOST, []) as ran:
        with store.session() as session, session.begin():
            snapshot = RecipeSnapshot(hash="h", name="a", path="a.toml", body={})
            session.add(snapshot)
            session.flush()
            session.add(Run(experiment_id=ran.id, recipe_id=snapshot.id, name="a", mode="sequential",
                            hosts="localhost:1", np=1, status="running"))
        raise KeyboardInterrupt
    assert f"experiment {ran.id}" in str(stopped.value)
    with store.session() as session:
        assert list(session.scalars(select(Experiment.id))) == [ran.id]
    store.close()
