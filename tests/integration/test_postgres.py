"""The store on a real PostgreSQL server (Debian's postgresql, started in a temporary folder by
scripts/postgres.sh): migrations, a round trip, and several processes writing at once (two real `xover train`
processes: tests/e2e/test_postgres_store.py)."""

import multiprocessing as mp

import pytest
from fixtures_services import postgres_server, postgres_url  # noqa: F401  (fixtures)
from sqlalchemy import func, select, text
from test_store import _fill, _schema_differences

from xover.analysis import experiment_jobs
from xover.recipes import load_recipe
from xover.store.models import SCHEMA_VERSION, Experiment, IterationMetric, RecipeSnapshot, Run
from xover.store.queries import snapshot_recipe
from xover.store.session import head_revision, open_store

WRITERS = 4
RUNS_PER_WRITER = 5
STEPS_PER_RUN = 20


def test_a_fresh_database_is_migrated_to_exactly_the_models(postgres_url):
    store = open_store(postgres_url)
    try:
        assert store.kind == "postgresql"
        assert _schema_differences(store) == []
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()
            assert connection.execute(text("SELECT version FROM schema_info")).scalar() == SCHEMA_VERSION
        store.close()
        store = open_store(postgres_url)  # opening again finds it current and changes nothing
        assert _schema_differences(store) == []
    finally:
        store.close()


def test_round_trip_and_plain_sql(postgres_url):
    store = open_store(postgres_url)
    try:
        run_id = _fill(store)
        with store.session() as session:
            run = session.get(Run, run_id)
            assert run.recipe.body["model"] == "mlp" and run.hosts == "localhost:2"
            assert session.scalar(select(func.count()).where(IterationMetric.run_id == run_id)) == 10
            [job] = experiment_jobs(session, "e1")
        assert job["iterations"] == 10 and job["accuracy"] == 0.9
        assert job["samples_per_s"] == pytest.approx(640.0) and job["final_loss"] == pytest.approx(0.1)
        with store.engine.connect() as connection:
            rate = connection.execute(text("SELECT samples_per_s FROM run_throughput "
                                           "WHERE experiment_id = 'e1' AND name = 'mlp-digits'")).scalar()
        assert rate == pytest.approx(640.0)
    finally:
        store.close()


def test_losses_that_are_not_finite_read_back_as_they_were(postgres_url):
    """PostgreSQL could keep a NaN loss itself, SQLite cannot: both keep it as its word (0022), so a store reads the
    same on either."""
    import math

    from xover.records import IterationRecord
    from xover.run.record import Recorder
    from xover.store.queries import iteration_rows

    store = open_store(postgres_url)
    try:
        run_id = _fill(store)
        Recorder(store, "e1").apply([
            (run_id, IterationRecord(step=step, time_s=1.0, wall_time=1010.0 + step, iteration_s=0.1, data_s=0.0,
                                     compute_s=0.0, communication_s=0.0, wait_s=0.0, samples=64, loss=loss))
            for step, loss in enumerate([math.nan, math.inf, -math.inf, None], start=10)
        ])
        with store.session() as session:
            read = [row["loss"] for row in iteration_rows(session, [run_id])[run_id]][10:]
        assert math.isnan(read[0]) and read[1:] == [math.inf, -math.inf, None]
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT loss, loss_not_finite FROM iteration_metrics WHERE step >= 10 "
                                           "ORDER BY step")).all() == [
                (None, "nan"), (None, "inf"), (None, "-inf"), (None, None)]
    finally:
        store.close()


def _write_runs(url, writer, barrier, results):
    """One xover process: open the (new) database, then record an experiment of runs and metrics."""
    try:
        barrier.wait(timeout=30)
        store = open_store(url)
        recipe = load_recipe("mlp-digits")
        barrier.wait(timeout=30)  # every writer has opened it: now all write at once
        for index in range(RUNS_PER_WRITER):
            with store.session() as session, session.begin():
                if index == 0:
                    session.add(Experiment(id=f"writer-{writer}", kind="run", command="xover run"))
                    session.flush()
                snapshot = snapshot_recipe(session, recipe)
                run = Run(experiment_id=f"writer-{writer}", recipe_id=snapshot.id, name=f"job-{index}",
                          mode="concurrent", hosts="localhost:2", np=2, status="running")
                session.add(run)
                session.flush()
                session.add_all(IterationMetric(run_id=run.id, step=step, time_s=step * 0.1, wall_time=step,
                                                iteration_s=0.1, data_s=0.0, compute_s=0.05, communication_s=0.05,
                                                wait_s=0.0, samples=64, loss=1.0 / (step + 1))
                                for step in range(STEPS_PER_RUN))
                run.status, run.exit_code = "finished", 0
        store.close()
        results.put(("ok", writer))
    except Exception as error:  # reported to the test, not swallowed
        results.put(("error", f"writer {writer}: {error!r}"))


def _run_at_once(target, url, count):
    context = mp.get_context("fork")  # separate processes, each with its own connections, as xover commands
    barrier, results = context.Barrier(count), context.Queue()
    processes = [context.Process(target=target, args=(url, index, barrier, results)) for index in range(count)]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=120) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return outcomes


def test_processes_open_a_new_database_and_write_runs_at_once(postgres_url):
    outcomes = _run_at_once(_write_runs, postgres_url, WRITERS)
    assert sorted(outcomes) == [("ok", writer) for writer in range(WRITERS)], outcomes
    store = open_store(postgres_url)
    try:
        with store.session() as session:
            assert session.scalar(select(func.count()).select_from(Experiment)) == WRITERS
            assert session.scalar(select(func.count()).select_from(Run).where(Run.status == "finished")) == \
                WRITERS * RUNS_PER_WRITER
            assert session.scalar(select(func.count()).select_from(IterationMetric)) == \
                WRITERS * RUNS_PER_WRITER * STEPS_PER_RUN
            assert session.scalar(select(func.count()).select_from(RecipeSnapshot)) == 1
        with store.engine.connect() as connection:
            assert connection.execute(text("SELECT COUNT(*) FROM alembic_version")).scalar() == 1
            assert connection.execute(text("SELECT COUNT(*) FROM schema_info")).scalar() == 1
    finally:
        store.close()


def _snapshot_recipes(url, writer, barrier, results):
    try:
        store = open_store(url)
        recipes = [load_recipe(name) for name in ("mlp-digits", "mlp-balanced", "resnet-synthetic")]
        ids = []
        for recipe in recipes:
            barrier.wait(timeout=30)  # every process asks for the same new recipe at the same moment
            with store.session() as session, session.begin():
                ids.append(snapshot_recipe(session, recipe).id)
        store.close()
        results.put(("ok", tuple(ids)))
    except Exception as error:
        results.put(("error", f"writer {writer}: {error!r}"))


def test_snapshot_recipe_from_processes_at_once_stores_one_row(postgres_url):
    open_store(postgres_url).close()  # migrated first: this test is about the snapshots
    outcomes = _run_at_once(_snapshot_recipes, postgres_url, WRITERS)
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    assert len({ids for _, ids in outcomes}) == 1, outcomes  # everyone got the same row for each recipe
    store = open_store(postgres_url)
    try:
        with store.session() as session:
            hashes = session.scalars(select(RecipeSnapshot.hash)).all()
        assert len(hashes) == len(set(hashes)) == 3
    finally:
        store.close()
