import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select

from xover.analysis import experiment_jobs
from xover.recipes import load_recipe
from xover.store.models import Evaluation, Experiment, IterationMetric, Profile, Run
from xover.store.profiles import find_profile
from xover.store.queries import snapshot_recipe
from xover.store.session import StoreError, head_revision, open_store

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _fill(store):
    recipe = load_recipe("mlp-digits")
    with store.session() as session, session.begin():
        session.add(Experiment(id="e1", kind="train", command="xover train"))
        snapshot = snapshot_recipe(session, recipe)
        assert snapshot_recipe(session, recipe).id == snapshot.id  # one snapshot per content hash
        run = Run(
            experiment_id="e1",
            recipe_id=snapshot.id,
            name="mlp-digits",
            mode="solo",
            hosts="localhost:2",
            np=2,
            status="finished",
            exit_code=0,
        )
        session.add(run)
        session.flush()
        for step in range(10):
            session.add(
                IterationMetric(
                    run_id=run.id,
                    step=step,
                    time_s=step * 0.1,
                    wall_time=1000.0 + step,
                    iteration_s=0.1,
                    data_s=0.01,
                    compute_s=0.05,
                    communication_s=0.04,
                    wait_s=0.0,
                    samples=64,
                    loss=1.0 / (step + 1),
                )
            )
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
        [(rate,)] = db.execute(
            "SELECT samples_per_s FROM run_throughput WHERE experiment_id='e1' AND name='mlp-digits'"
        ).fetchall()
        assert rate == pytest.approx(640.0)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_plain_sql_tells_a_comparisons_crossover_runs_apart_by_policy(tmp_path):
    """A comparison's crossover runs differ only by their turn policy: the view says which is which."""
    path = tmp_path / "p.db"
    store = open_store(str(path))
    with store.session() as session, session.begin():
        session.add(Experiment(id="e2", kind="run", command="xover run"))
        snapshot = snapshot_recipe(session, load_recipe("mlp-digits"))
        for policy, iteration_s in (("work-conserving", 0.1), ("round-robin", 0.2)):
            run = Run(
                experiment_id="e2",
                recipe_id=snapshot.id,
                name="mlp-digits",
                mode="crossover",
                policy=policy,
                engine="torch",
                group_index=0,
                hosts="localhost:2",
                np=2,
                status="finished",
            )
            session.add(run)
            session.flush()
            for step in range(4):
                session.add(
                    IterationMetric(
                        run_id=run.id,
                        step=step,
                        time_s=step * iteration_s,
                        wall_time=step,
                        iteration_s=iteration_s,
                        data_s=0,
                        compute_s=0,
                        communication_s=0,
                        wait_s=0,
                        samples=64,
                        loss=1.0,
                    )
                )
    store.close()
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT policy, engine, group_index, samples_per_s FROM run_throughput "
            "WHERE experiment_id = 'e2' ORDER BY policy"
        ).fetchall()
    assert [row[:3] for row in rows] == [("round-robin", "torch", 0), ("work-conserving", "torch", 0)]
    assert [row[3] for row in rows] == pytest.approx([320.0, 640.0])


def _a_finished_and_a_failed_run(path):
    """Two runs of one recipe, 640 samples/s each over their iterations: one finished, one failed part-way."""
    store = open_store(str(path))
    with store.session() as session, session.begin():
        session.add(Experiment(id="e3", kind="run", command="xover run"))
        snapshot = snapshot_recipe(session, load_recipe("mlp-digits"))
        for name, status in (("whole", "finished"), ("cut", "failed")):
            run = Run(experiment_id="e3", recipe_id=snapshot.id, name=name, mode="sequential", hosts="localhost:2",
                      np=2, status=status)
            session.add(run)
            session.flush()
            for step in range(4):
                session.add(IterationMetric(run_id=run.id, step=step, time_s=step * 0.1, wall_time=step,
                                            iteration_s=0.1, data_s=0, compute_s=0, communication_s=0, wait_s=0,
                                            samples=64, loss=1.0))
    store.close()


def _throughput_rows(path):
    with sqlite3.connect(path) as db:
        return dict(((name, status), (rate, iterations, mean)) for name, status, rate, iterations, mean in db.execute(
            "SELECT name, status, samples_per_s, iterations, mean_iteration_s FROM run_throughput "
            "WHERE experiment_id = 'e3'"))


def test_plain_sql_gives_a_run_that_did_not_finish_no_throughput(tmp_path):
    """0020: the view gave a failed run its samples/s, which every other view leaves out (analysis.compare):
    NULL now; its iterations and mean iteration time stay."""
    path = tmp_path / "f.db"
    _a_finished_and_a_failed_run(path)
    rows = _throughput_rows(path)
    assert rows[("whole", "finished")] == (pytest.approx(640.0), 3, pytest.approx(0.1))
    assert rows[("cut", "failed")] == (None, 3, pytest.approx(0.1))


def test_a_store_at_0019_is_upgraded_to_the_view_without_unfinished_throughput_and_back(tmp_path):
    """A store at the previous head (0019, the view of 0010) gains 0020's view on opening; 0020's downgrade
    gives the failed run its samples/s again."""
    from xover.store.views import DROP_RUN_THROUGHPUT_VIEW, RUN_THROUGHPUT_VIEW_0010

    path = tmp_path / "at-0019.db"
    _a_finished_and_a_failed_run(path)
    with sqlite3.connect(path) as db:  # back to 0019, as a store of the previous xover is
        db.execute(DROP_RUN_THROUGHPUT_VIEW)
        db.execute(RUN_THROUGHPUT_VIEW_0010)
        db.execute("UPDATE alembic_version SET version_num = '0019'")
    assert _throughput_rows(path)[("cut", "failed")][0] == pytest.approx(640.0)
    open_store(str(path)).close()
    assert _throughput_rows(path)[("cut", "failed")][0] is None
    _downgrade(path, "0019")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0019"
    assert _throughput_rows(path)[("cut", "failed")][0] == pytest.approx(640.0)


def test_a_store_at_0020_gains_each_runs_own_files_and_loses_them_on_the_way_back(tmp_path):
    """0021 adds runs.inputs (a run's own job file and script), NULL for the runs before it; its downgrade drops
    it and keeps the runs."""
    path = tmp_path / "at-0020.db"
    _a_finished_and_a_failed_run(path)
    with sqlite3.connect(path) as db:  # back to 0020, as a store of the previous xover is
        db.execute("ALTER TABLE runs DROP COLUMN inputs")
        db.execute("UPDATE alembic_version SET version_num = '0020'")
    store = open_store(str(path))
    assert _schema_differences(store) == []
    store.close()
    with sqlite3.connect(path) as db:
        assert {row[0] for row in db.execute("SELECT inputs FROM runs")} == {None}
    _downgrade(path, "0020")
    with sqlite3.connect(path) as db:
        assert "inputs" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def _downgrade(path, revision):
    """Take the store at `path` down to `revision` through the migrations' own downgrades."""
    from alembic import command
    from alembic.config import Config

    from xover.store.session import MIGRATIONS, upgrade_engine

    engine = upgrade_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
    engine.dispose()


def test_a_store_at_0021_keeps_losses_that_are_not_finite_apart_from_those_not_known(tmp_path):
    """0022: SQLite kept a NaN loss as NULL, which says "not known", and a diverged job read as healthy. A store of
    the previous xover is upgraded; a loss NaN, inf or -inf reads back as it was, a None as None; the downgrade
    drops the column and keeps the iterations."""
    import math

    from alembic import command
    from alembic.config import Config

    from xover.records import IterationRecord
    from xover.run.record import Recorder
    from xover.store.queries import iteration_rows
    from xover.store.session import MIGRATIONS, upgrade_engine

    path = tmp_path / "at-0021.db"
    _a_finished_and_a_failed_run(path)
    with sqlite3.connect(path) as db:  # back to 0021, as a store of the previous xover is
        db.execute("ALTER TABLE iteration_metrics DROP COLUMN loss_not_finite")
        db.execute("UPDATE alembic_version SET version_num = '0021'")
    store = open_store(str(path))
    assert _schema_differences(store) == []
    with store.session() as session:
        run_id = session.scalars(select(Run.id).where(Run.name == "whole")).one()
    losses = [0.5, math.nan, math.inf, -math.inf, None]
    Recorder(store, "e3").apply([
        (run_id, IterationRecord(step=step, time_s=0.1, wall_time=10.0 + step, iteration_s=0.1, data_s=0.0,
                                 compute_s=0.0, communication_s=0.0, wait_s=0.0, samples=64, loss=loss))
        for step, loss in enumerate(losses, start=4)
    ])
    with store.session() as session:
        read = [row["loss"] for row in iteration_rows(session, [run_id])[run_id]]
        [job] = [job for job in experiment_jobs(session, "e3") if job["name"] == "whole"]
    store.close()
    assert read[:5] == [1.0, 1.0, 1.0, 1.0, 0.5] and math.isnan(read[5]) and read[6:] == [math.inf, -math.inf, None]
    assert job["final_loss"] == -math.inf and job["loss_not_finite"] == {"step": 5, "loss": "nan", "iterations": 3}
    with sqlite3.connect(path) as db:  # plain SQL: the loss column keeps numbers only, the word says which
        assert db.execute("SELECT loss, loss_not_finite FROM iteration_metrics WHERE step >= 4 AND run_id = ? "
                          "ORDER BY step", (run_id,)).fetchall() == [
            (0.5, None), (None, "nan"), (None, "inf"), (None, "-inf"), (None, None)]
    engine = upgrade_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        command.downgrade(config, "0021")
    engine.dispose()
    with sqlite3.connect(path) as db:
        assert "loss_not_finite" not in {row[1] for row in db.execute("PRAGMA table_info(iteration_metrics)")}
        assert db.execute("SELECT count(*) FROM iteration_metrics").fetchone()[0] == 13


def test_newer_schema_is_refused_clearly(tmp_path):
    path = str(tmp_path / "c.db")
    open_store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")  # a migration this xover does not know
    with pytest.raises(StoreError, match="newer xover"):
        open_store(path)


def test_a_database_from_the_first_release_is_upgraded_with_its_data(tmp_path):
    """A database written at commit cc272ad (before migrations, before the profiles' engine column,
    with NOT NULL losses) opens, keeps its rows, and gains every column of today's schema."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript((ASSETS / "db-release-cc272ad.sql").read_text())
    store = open_store(str(path))
    with store.session() as session:
        [job] = [j for j in experiment_jobs(session, session.scalars(select(Experiment.id)).first())]
        assert job["iterations"] == 4 and job["status"] == "finished"
        profile = session.scalars(select(Profile)).one()
        assert profile.engine == "horovod" and profile.link_ms is None
        session.add(
            IterationMetric(
                run_id=job["run_id"],
                step=99,
                time_s=0,
                wall_time=0,
                iteration_s=0.1,
                data_s=0,
                compute_s=0,
                communication_s=0,
                wait_s=0,
                samples=1,
                loss=None,
                yields=2,
            )
        )
        session.commit()
    assert _schema_differences(store) == []
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision()
        assert db.execute("SELECT COUNT(*) FROM run_throughput").fetchone()[0] == 2


def test_an_upgrade_that_fails_half_way_leaves_the_store_as_it_was(tmp_path):
    """pysqlite runs DDL outside any transaction: an upgrade that failed after a migration added its
    column kept the column but not the revision, and every later open failed ("duplicate column")."""
    path = tmp_path / "half.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as db:  # back to revision 0006, with a cause of failure after its migration
        db.execute("ALTER TABLE profiles DROP COLUMN corun_partner_link_share")  # what 0007 adds
        db.execute("ALTER TABLE runs DROP COLUMN comm_threads")  # what 0008 adds
        for column in ("backend", "deterministic", "devices_per_gpu", "gpu_sharing"):  # what 0011 adds
            db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        for column in ("corun_stretch", "mps_stretch", "gpu_busy"):  # what 0012 and 0013 add
            db.execute(f"ALTER TABLE profiles DROP COLUMN {column}")
        db.execute("UPDATE alembic_version SET version_num = '0006'")
        db.execute("ALTER TABLE schema_info RENAME TO schema_info_away")
    with pytest.raises(StoreError, match="no such table: schema_info"):
        open_store(str(path))
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0006"
        assert "corun_partner_link_share" not in {row[1] for row in db.execute("PRAGMA table_info(profiles)")}
        db.execute("ALTER TABLE schema_info_away RENAME TO schema_info")  # the cause gone, it upgrades
    store = open_store(str(path))
    assert _schema_differences(store) == []


def test_interference_measured_before_0009_is_derived_again_from_the_stored_corun(tmp_path):
    """0009: a profile's interference becomes its co-run device time over its device time alone, less
    one (what the simulation explained with the partner's communication CPU is no longer taken off)."""
    path = tmp_path / "before.db"
    store = open_store(str(path))
    with store.session() as session, session.begin():
        snapshot = snapshot_recipe(session, load_recipe("mlp-digits"))
        for name, corun_ms, stored in (("a", 60.0, 0.05), ("b", 10.0, -0.1), ("c", None, None)):
            session.add(
                Profile(
                    recipe_id=snapshot.id,
                    recipe_hash="h",
                    name=name,
                    np=2,
                    bandwidth="host",
                    hardware="x",
                    iterations=10,
                    data_ms=5.0,
                    compute_ms=35.0,
                    comm_ms=10.0,
                    iteration_ms=50.0,
                    samples_per_s=1.0,
                    memory_gb=0.1,
                    gradient_bytes=1,
                    spread={},
                    corun_partner="mlp-balanced" if corun_ms else None,
                    corun_device_ms=corun_ms,
                    interference=stored,
                )
            )
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '0008'")
        for column in ("backend", "deterministic", "devices_per_gpu", "gpu_sharing"):  # what 0011 adds
            db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        for column in ("corun_stretch", "mps_stretch", "gpu_busy"):  # what 0012 and 0013 add
            db.execute(f"ALTER TABLE profiles DROP COLUMN {column}")
    store = open_store(str(path))
    with store.session() as session:
        found = {p.name: p.interference for p in session.scalars(select(Profile))}
    assert found["a"] == pytest.approx(60.0 / 40.0 - 1.0)
    assert found["b"] == pytest.approx(-0.5)  # 10 / 40 - 1, kept at the model's floor
    assert found["c"] is None  # no co-run measured: nothing to derive


@pytest.mark.parametrize("edited_0012", [False, True])
def test_a_store_upgraded_by_either_0012_gains_gpu_busy_once(tmp_path, edited_0012):
    """0012 was edited to add gpu_busy after it had upgraded stores: a store of the first 0012 lacked the
    column and every profile query failed ("no such column: profiles.gpu_busy"); 0013 adds it where it
    is missing, and leaves a store of the edited 0012 as it is."""
    path = tmp_path / "at-0012.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '0012'")
        if not edited_0012:
            db.execute("ALTER TABLE profiles DROP COLUMN gpu_busy")
    store = open_store(str(path))
    assert _schema_differences(store) == []
    assert find_profile(store, "h", 2, "1gbit", "x", "horovod", 1) is None  # the query that failed
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision() == "0022"


def test_migrations_build_exactly_the_models(tmp_path):
    assert _schema_differences(open_store(str(tmp_path / "new.db"))) == []


def _schema_differences(store):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from xover.store.models import Base

    with store.engine.connect() as connection:
        differences = compare_metadata(
            MigrationContext.configure(connection, opts={"compare_type": False}), Base.metadata
        )
    return differences


def _open_and_snapshot(path, queue):
    try:
        store = open_store(path)
        with store.session() as session, session.begin():
            queue.put(snapshot_recipe(session, load_recipe("mlp-digits")).id)
    except Exception as error:  # reported to the test, not swallowed
        queue.put(repr(error))


def test_two_processes_open_a_new_database_and_snapshot_one_recipe_at_once(tmp_path):
    import multiprocessing as mp

    path = str(tmp_path / "race.db")
    queue = mp.Queue()
    procs = [mp.Process(target=_open_and_snapshot, args=(path, queue)) for _ in range(4)]
    for proc in procs:
        proc.start()
    ids = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join()
    assert len(set(ids)) == 1 and isinstance(ids[0], int), ids


def test_a_store_reached_through_a_link_and_by_its_own_path_is_upgraded_under_one_lock(tmp_path):
    """The migration lock was made beside the path given: a store opened through a link and by its own path took
    two locks, and two upgrades of one new store could run at once. Now the lock is beside the file the link names
    (where SQLite keeps its WAL): while the test holds it, an opening by either path waits for it."""
    import fcntl
    import subprocess
    import sys
    import time

    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    target, link = tmp_path / "real" / "x.db", tmp_path / "links" / "x.db"
    link.symlink_to(target)  # to a store not made yet: the first opening makes it, and upgrades it
    lock = tmp_path / "real" / "x.db.migrate.lock"
    opening = "import sys; from xover.store.session import open_store; open_store(sys.argv[1]).close()"
    with open(os.open(lock, os.O_RDWR | os.O_CREAT, 0o644), "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        openers = [subprocess.Popen([sys.executable, "-c", opening, str(path)], stderr=subprocess.PIPE, text=True)
                   for path in (link, target)]
        try:
            deadline = time.monotonic() + 120
            while not all(_waits_for_lock(opener.pid, os.fstat(held.fileno()).st_ino) for opener in openers):
                assert all(opener.poll() is None for opener in openers), "a store opened while its lock was held"
                assert time.monotonic() < deadline, "no opening came to the lock"
                time.sleep(0.1)
            assert not target.exists()  # neither has begun its upgrade
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            for opener in openers:
                _, err = opener.communicate(timeout=120)
                assert opener.returncode == 0, err
    assert not (tmp_path / "links" / "x.db.migrate.lock").exists()
    with sqlite3.connect(target) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]


def _waits_for_lock(pid: int, inode: int) -> bool:
    """Whether process `pid` waits for a flock on the file of `inode` (/proc/locks: a waiter's line has '->')."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[5] == str(pid) and fields[6].endswith(f":{inode}"):
            return True
    return False


def test_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create the folder"):
        open_store(str(blocker / "sub" / "x.db"))


def test_a_profile_of_the_old_shared_loopback_is_never_reused_as_a_rate_per_node(tmp_path):
    """0012: --bandwidth R on one machine now means R per node; a profile taken when the loopback was R for
    all the nodes keeps the link it had, so that a plan or a profile asks for a new one."""
    path = tmp_path / "old.db"
    store = open_store(str(path))
    with store.session() as session, session.begin():
        snapshot = snapshot_recipe(session, load_recipe("mlp-digits"))
        for name, bandwidth, hosts in (("one-host", "1gbit", 1), ("two-hosts", "1gbit", 2), ("unshaped", "host", 1)):
            session.add(
                Profile(
                    recipe_id=snapshot.id,
                    recipe_hash="h",
                    name=name,
                    np=2,
                    bandwidth=bandwidth,
                    hosts=hosts,
                    hardware="x",
                    iterations=10,
                    data_ms=5.0,
                    compute_ms=35.0,
                    comm_ms=10.0,
                    iteration_ms=50.0,
                    samples_per_s=1.0,
                    memory_gb=0.1,
                    gradient_bytes=1,
                    spread={},
                )
            )
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '0011'")
        for column in ("corun_stretch", "mps_stretch", "gpu_busy"):  # what 0012 and 0013 add
            db.execute(f"ALTER TABLE profiles DROP COLUMN {column}")
    store = open_store(str(path))
    with store.session() as session:
        found = {p.name: p.bandwidth for p in session.scalars(select(Profile))}
    assert found == {"one-host": "1gbit (shared lo)", "two-hosts": "1gbit", "unshaped": "host"}
    from xover.store.profiles import profiled_links

    assert profiled_links(store, [("h", 2, "horovod")]) == [{"1gbit", "host"}]  # the old loopback's is no rate


def test_a_group_run_without_a_plan_gets_the_plans_predictions_from_its_stored_profiles(tmp_path):
    """`xover run --group A B --mode adaptive`: the group starts in the way its profiles predict better, as a
    planned one does (run/units.py's prior), and without turns where a job has no profile at the link."""
    from xover.devices import hardware_fingerprint
    from xover.links import Link
    from xover.run.jobs import GroupToRun, job_for, unique_names
    from xover.run.traits import predict_unplanned
    from xover.run.units import adaptive_prior
    from xover.turns.protocol import TURNS

    store = open_store(str(tmp_path / "a.db"))
    recipe = load_recipe("mlp-balanced")
    jobs = unique_names([job_for(recipe), job_for(recipe)])
    bare = GroupToRun(0, jobs)
    predict_unplanned(store, bare, Link.parse("1gbit"), "work-conserving", ["adaptive"])
    assert bare.predicted_by_sharing == {} and adaptive_prior(bare) is None  # no profile: nothing predicted
    with store.session() as session, session.begin():
        snapshot = snapshot_recipe(session, recipe)
        # half of each iteration on the link: two copies gain by turns, not by running together
        session.add(
            Profile(
                recipe_id=snapshot.id,
                recipe_hash=recipe.hash,
                name=recipe.name,
                np=recipe.np,
                engine=jobs[0].engine,
                bandwidth="1gbit",
                hosts=len(jobs[0].devices),
                hardware=hardware_fingerprint(),
                iterations=10,
                data_ms=5.0,
                compute_ms=45.0,
                comm_ms=50.0,
                link_ms=50.0,
                iteration_ms=100.0,
                samples_per_s=1.0,
                memory_gb=0.1,
                gradient_bytes=1,
                spread={},
            )
        )
    group = GroupToRun(0, jobs)
    predict_unplanned(store, group, Link.parse("1gbit"), "work-conserving", ["adaptive"])
    assert {"crossover", "concurrent"} <= set(group.predicted_by_sharing)
    assert group.predicted_by_sharing["crossover"] > group.predicted_by_sharing["concurrent"]
    assert adaptive_prior(group) == TURNS
    store.close()


def test_a_database_of_another_application_is_refused_and_left_as_it_was(tmp_path):
    """`xover --db theirs.db report` (a command that only reads) created xover's 18 tables in another
    application's SQLite database; one with a table named `experiments` failed on it, MLflow's (which Alembic
    versions too) was told it was written by a newer xover."""
    import sqlite3

    from xover.store.session import StoreError, open_store

    for tables in (["foo"], ["experiments"], ["alembic_version", "runs", "metrics"]):
        path = tmp_path / f"{tables[0]}.db"
        with sqlite3.connect(path) as connection:
            for table in tables:
                connection.execute(f"CREATE TABLE {table} (version_num VARCHAR(32))")
            if "alembic_version" in tables:  # MLflow's store: Alembic's too, at a revision of MLflow's
                connection.execute("INSERT INTO alembic_version VALUES ('dc11669786a5')")
        with pytest.raises(StoreError, match="is not an xover store: it holds another application's tables"):
            open_store(f"sqlite:///{path}")
        with sqlite3.connect(path) as connection:
            found = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert found == set(tables)
