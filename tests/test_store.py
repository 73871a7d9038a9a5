import sqlite3

import pytest
from sqlalchemy import select

from xover.recipes import load_recipe
from xover.store.models import Evaluation, Experiment, IterationMetric, Run, SchemaInfo
from xover.store.queries import experiment_jobs, snapshot_recipe
from xover.store.session import StoreError, open_store


def _fill(store):
    recipe = load_recipe("mlp-digits")
    with store.session() as session, session.begin():
        session.add(Experiment(id="e1", kind="train", command="xover train"))
        snapshot = snapshot_recipe(session, recipe)
        assert snapshot_recipe(session, recipe).id == snapshot.id  # one snapshot per content hash
        run = Run(experiment_id="e1", recipe_id=snapshot.id, name="mlp-digits", mode="solo", hosts="localhost:2",
                  np=2, status="finished", exit_code=0)
        session.add(run)
        session.flush()
        for step in range(10):
            session.add(IterationMetric(run_id=run.id, step=step, time_s=step * 0.1, wall_time=1000.0 + step,
                                        iteration_s=0.1, data_s=0.01, compute_s=0.05, communication_s=0.04,
                                        wait_s=0.0, samples=64, loss=1.0 / (step + 1)))
        session.add(Evaluation(run_id=run.id, step=10, metric="test_accuracy", value=0.9))
    return run.id


def test_round_trip(tmp_path):
    store = open_store(str(tmp_path / "a.db"))
    run_id = _fill(store)
    with store.session() as session:
        run = session.get(Run, run_id)
        assert run.recipe.body["model"] == "mlp"
        assert len(session.scalars(select(IterationMetric).where(IterationMetric.run_id == run_id)).all()) == 10
        [job] = experiment_jobs(session, "e1")
    assert job["iterations"] == 10 and job["accuracy"] == 0.9
    assert job["samples_per_s"] == pytest.approx(640.0)
    assert job["final_loss"] == pytest.approx(0.1)


def test_plain_sql_answers_throughput(tmp_path):
    path = tmp_path / "b.db"
    _fill(open_store(str(path)))
    with sqlite3.connect(path) as db:
        [(rate,)] = db.execute("SELECT samples_per_s FROM run_throughput WHERE experiment_id='e1' "
                               "AND name='mlp-digits'").fetchall()
        assert rate == pytest.approx(640.0)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_is_refused_clearly(tmp_path):
    path = str(tmp_path / "c.db")
    store = open_store(path)
    with store.session() as session, session.begin():
        session.scalars(select(SchemaInfo)).one().version = 999
    store.close()
    with pytest.raises(StoreError, match="newer xover"):
        open_store(path)


def test_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create the folder"):
        open_store(str(blocker / "sub" / "x.db"))
