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
