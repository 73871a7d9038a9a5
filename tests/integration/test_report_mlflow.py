"""`xover report --format mlflow` on a hand-made store, read back with MLflow's own client from a SQLite tracking
store (a real comparison run: tests/e2e/test_mlflow_of_a_run.py): every experiment of `all`, a changed
experiment replaced rather than duplicated, and bad input as one line (exit 2)."""

import json
import socket
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from sqlalchemy import update
from test_report import _hand_made_store, _one_error_line, _with_a_failed_job, _with_adaptive
from typer.testing import CliRunner

from xover.cli import app
from xover.store.models import IterationMetric
from xover.store.session import open_store

runner = CliRunner()
PLAN = "20260101-000000-plan"
SOLO = "20260101-000100-solo"


@pytest.fixture(autouse=True)
def no_mlflow_environment(monkeypatch):
    for variable in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(variable, raising=False)


def report(*args: str):
    return runner.invoke(app, ["report", *args])


def _runs(uri: str, view=ViewType.ACTIVE_ONLY) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("xover")
    return client.search_runs([experiment.experiment_id], run_view_type=view, max_results=1000)


def test_an_adaptive_groups_decisions_go_to_mlflow(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    _with_adaptive(isolated_results / "xover.db")
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    result = report(PLAN, "--format", "mlflow", "--tracking-uri", uri)
    assert result.exit_code == 0, result.output
    parent = next(run for run in _runs(uri) if run.data.tags["xover.kind"] == "experiment")
    client = MlflowClient(tracking_uri=uri)
    turns = client.get_metric_history(parent.info.run_id, "group0.adaptive.turns")
    assert [(m.step, m.value) for m in sorted(turns, key=lambda m: m.step)] == [(0, 0.0), (1, 0.0), (2, 1.0), (3, 1.0)]
    probes = client.get_metric_history(parent.info.run_id, "group0.adaptive.crossover")
    assert sorted((m.step, m.value) for m in probes) == [(2, pytest.approx(1.6)), (3, pytest.approx(1.6))]
    assert parent.data.metrics["group0.adaptive_vs_sequential"] == pytest.approx(1.6)
    artifacts = {item.path for item in client.list_artifacts(parent.info.run_id)}
    assert "adaptive-group0.json" in artifacts
    saved = client.download_artifacts(parent.info.run_id, "adaptive-group0.json", str(isolated_results))
    timeline = json.loads(Path(saved).read_text())
    assert timeline["time_in_ways"] == {"concurrent": pytest.approx(0.4), "crossover": pytest.approx(0.6)}
    assert timeline["timeline"][3]["decision"]["rule"] == "clear"  # each decision with its figures


def test_every_experiment_once_and_a_changed_one_replaced(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    result = report("all", "--format", "mlflow", "--tracking-uri", uri)
    assert result.exit_code == 0, result.output
    assert f"{PLAN}: wrote 4 job runs" in result.output and f"{SOLO}: wrote 1 job run and" in result.output
    runs = _runs(uri)
    parents = {run.data.tags["xover.experiment"]: run for run in runs if run.data.tags["xover.kind"] == "experiment"}
    assert set(parents) == {PLAN, SOLO}
    jobs = [run for run in runs if run.data.tags["xover.kind"] == "job"]
    tags = [run.data.tags for run in jobs]
    assert sorted((tag["xover.experiment"], tag["xover.job"], tag["xover.mode"]) for tag in tags) == [
        (PLAN, "a", "crossover"), (PLAN, "a", "sequential"), (PLAN, "b", "crossover"), (PLAN, "b", "sequential"),
        (SOLO, "a", "solo")]
    plan = parents[PLAN]
    assert plan.data.metrics["group0.gain"] == pytest.approx(2.0)
    assert plan.data.metrics["group0.predicted_gain"] == pytest.approx(1.6)
    assert plan.data.metrics["group0.gain_error_pct"] == pytest.approx(25.0)
    b_turns = next(r for r in jobs if r.data.tags["xover.job"] == "b" and r.data.tags["xover.mode"] == "crossover")
    assert b_turns.data.metrics["loss_parity.max_abs_diff"] == pytest.approx(0.5)
    assert b_turns.data.metrics["loss_parity.identical"] == 0.0
    history = MlflowClient(tracking_uri=uri).get_metric_history(b_turns.info.run_id, "loss")
    assert [(m.step, round(m.value, 6)) for m in sorted(history, key=lambda m: m.step)][2:5] == [
        (2, 1.8), (3, 2.2), (4, 1.6)]
    assert min(m.timestamp for m in history) == 1000040  # the iteration's wall time, in ms

    again = report("all", "--format", "mlflow", "--tracking-uri", uri)
    assert again.exit_code == 0 and again.output.count("already in MLflow, unchanged") == 2, again.output
    assert sorted(r.info.run_id for r in _runs(uri)) == sorted(r.info.run_id for r in runs)

    # a figure changed in the store (say, the run went on): the experiment's runs are replaced, never doubled
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        session.execute(update(IterationMetric).where(IterationMetric.step == 9).values(loss=0.25))
    store.close()
    replaced = report(PLAN, "--format", "mlflow", "--tracking-uri", uri)
    assert replaced.exit_code == 0 and f"{PLAN}: replaced 4 job runs" in replaced.output, replaced.output
    active = _runs(uri)
    assert len(active) == len(runs)
    assert len([r for r in active if r.data.tags["xover.experiment"] == PLAN]) == 5
    assert parents[SOLO].info.run_id in {r.info.run_id for r in active}  # the other experiment untouched
    assert all(r.data.metrics["final_loss"] == 0.25 for r in active
               if r.data.tags["xover.experiment"] == PLAN and r.data.tags["xover.kind"] == "job")


def test_a_diverged_jobs_nan_loss_goes_to_mlflow_as_nan(isolated_results):
    """A loss that became NaN is a metric too: its history and final loss were the last finite ones before."""
    import math

    _hand_made_store(isolated_results / "xover.db")
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        session.execute(update(IterationMetric).where(IterationMetric.step == 9).values(loss=None, loss_not_finite="nan"))
    store.close()
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    result = report(PLAN, "--format", "mlflow", "--tracking-uri", uri)
    assert result.exit_code == 0, result.output
    jobs = [run for run in _runs(uri) if run.data.tags["xover.kind"] == "job"]
    assert len(jobs) == 4 and all(math.isnan(run.data.metrics["final_loss"]) for run in jobs)
    history = MlflowClient(tracking_uri=uri).get_metric_history(jobs[0].info.run_id, "loss")
    assert [m.step for m in history if math.isnan(m.value)] == [9]


def test_an_experiment_with_a_failed_job_is_a_failed_parent_run(isolated_results):
    """The parent run of an experiment whose job failed was logged FINISHED, tagged `xover.status=finished`."""
    _hand_made_store(isolated_results / "xover.db")
    _with_a_failed_job(isolated_results / "xover.db")
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    result = report("all", "--format", "mlflow", "--tracking-uri", uri)
    assert result.exit_code == 0, result.output
    runs = _runs(uri)
    parents = {run.data.tags["xover.experiment"]: run for run in runs if run.data.tags["xover.kind"] == "experiment"}
    assert (parents[PLAN].info.status, parents[PLAN].data.tags["xover.status"]) == ("FAILED", "failed")
    assert (parents[SOLO].info.status, parents[SOLO].data.tags["xover.status"]) == ("FINISHED", "finished")
    [failed] = [run for run in runs if run.data.tags.get("xover.status") == "failed" and run.data.tags["xover.kind"]
                == "job"]
    assert (failed.data.tags["xover.job"], failed.data.tags["xover.mode"], failed.info.status) == (
        "b", "sequential", "FAILED")


def test_the_mlflow_experiment_name_comes_from_mlflows_variable(isolated_results, monkeypatch):
    _hand_made_store(isolated_results / "xover.db")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "crossover-study")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{isolated_results / 'mlflow.db'}")
    assert report(SOLO, "--format", "mlflow").exit_code == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{isolated_results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("crossover-study")
    [parent, job] = sorted(client.search_runs([experiment.experiment_id]), key=lambda r: r.data.tags["xover.kind"])
    assert parent.data.tags["xover.kind"] == "experiment" and job.data.tags["mlflow.parentRunId"] == parent.info.run_id


# ------------------------------------------------------------------------------ errors


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_bad_input_is_one_line_and_exit_2(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    _one_error_line(report(PLAN, "--tracking-uri", uri), "--tracking-uri is for --format mlflow")
    _one_error_line(report(PLAN, "--format", "json", "--tracking-uri", uri), "--tracking-uri is for --format mlflow")
    _one_error_line(report(PLAN, "--format", "mlflow"), "--format mlflow needs --tracking-uri")
    _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", uri, "--out", "x"), "--out is for")
    _one_error_line(report("nope", "--format", "mlflow", "--tracking-uri", uri), "no experiment 'nope'")
    missing = isolated_results / "absent" / "mlflow.db"
    _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", f"sqlite:///{missing}"),
                    f"--tracking-uri sqlite:///{missing}", "no folder")
    _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", "nonsense://x"),
                    "--tracking-uri nonsense://x", "unsupported URI")
    unreachable = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", unreachable),
                    f"--tracking-uri {unreachable}", "cannot reach")
    assert time.monotonic() - started < 30  # MLflow's retries are off for the first request
    # a database store: MLflow retried its first connection for about 110 s, 45 lines of warnings
    for database, words in ((f"postgresql://me:pw@127.0.0.1:{_free_port()}/x", "cannot reach"),
                            ("mysql://me:pw@127.0.0.1:1/x", "driver is not installed"),
                            # a SQLite file MLflow cannot create (a folder not its to write): the same 100 s
                            ("sqlite:////proc/mlflow.db", "unable to open database file")):
        started = time.monotonic()
        _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", database), "--tracking-uri", words)
        assert time.monotonic() - started < 30
    assert not (isolated_results / "mlflow.db").exists()  # nothing was written anywhere


def test_a_tracking_uri_that_names_the_store_is_refused_before_mlflow_runs(isolated_results, monkeypatch):
    """`--tracking-uri sqlite:///STORE` (xover's own store) ran MLflow's migrations on it: a 130-line traceback
    (alembic: "Can't locate revision identified by '0019'") and MLflow's tables (metrics, params, tags) left in
    xover's store. Now the store's file (a link to it, its WAL, the path of a file store) and the same database
    URL are one line, exit 2, before MLflow is imported."""
    store = isolated_results / "xover.db"
    _hand_made_store(store)
    (isolated_results / "link.db").symlink_to(store)

    def tables() -> set[str]:
        with closing(sqlite3.connect(store)) as connection:
            return {name for (name,) in connection.execute("select name from sqlite_master where type = 'table'")}

    before = tables()
    for uri in (f"sqlite:///{store}", f"sqlite:///{isolated_results / 'link.db'}", f"sqlite:///{store}?mode=rwc",
                f"sqlite:///{store}-wal", str(store), store.as_uri()):
        _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri", uri),
                        f"--tracking-uri {uri}: that is the store {store}", "MLflow needs a database of its own")
    assert tables() == before and "metrics" not in before
    assert report(PLAN, "--format", "json").exit_code == 0  # the store still reads
    # a database server's store: the same database, whatever its driver, its user, or a default port left out
    monkeypatch.setenv("XOVER_DB", "postgresql://xover:pw@db.example/xover")
    _one_error_line(report(PLAN, "--format", "mlflow", "--tracking-uri",
                           "postgresql+psycopg2://mlflow@DB.example:5432/xover"), "that is the store's database")


def test_no_database_is_named_before_mlflow_is_asked(isolated_results):
    _one_error_line(report("--format", "mlflow", "--tracking-uri", f"sqlite:///{isolated_results / 'm.db'}"),
                    "no database at")
    assert not (isolated_results / "m.db").exists()


SECRET = "KX7SEC-mlflow-pw QZ9END"


def test_the_tracking_uri_is_shown_without_its_credentials(isolated_results):
    """Issue 58 (low): the tracking URI was printed as given, its password or token included, in the line
    that says where the runs went and in every error line."""
    _hand_made_store(isolated_results / "xover.db")
    unreachable = f"http://me:{SECRET.replace(' ', '%20')}@127.0.0.1:1/"
    result = report(SOLO, "--format", "mlflow", "--tracking-uri", unreachable)
    assert result.exit_code == 2 and "http://me:***@127.0.0.1:1/" in result.output, result.output
    assert "KX7SEC" not in result.output and "QZ9END" not in result.output, result.output
    written = report(SOLO, "--format", "mlflow", "--tracking-uri",
                     f"sqlite:///{isolated_results / 'mlflow.db'}?token={SECRET.replace(' ', '%20')}")
    assert written.exit_code == 0 and f"{SOLO}: wrote 1 job run and" in written.output, written.output
    assert "token=***" in written.output and "KX7SEC" not in written.output, written.output


def test_another_users_experiment_of_the_same_name_is_refused_unless_named(isolated_results, monkeypatch):
    """Issue 58 (low): an existing experiment named `xover` (another user's on a shared tracking server) was
    written into silently. Now xover tags the experiments it makes with their owner: another user's is
    refused unless MLFLOW_EXPERIMENT_NAME names it, and one that xover did not make for you is said."""
    import getpass

    _hand_made_store(isolated_results / "xover.db")
    uri = f"sqlite:///{isolated_results / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    artifacts = (isolated_results / "mlruns").as_uri()  # not MLflow's default, ./mlruns
    client.create_experiment("xover", artifact_location=artifacts, tags={"xover.owner": "someone-else"})
    refused = report(SOLO, "--format", "mlflow", "--tracking-uri", uri)
    assert refused.exit_code == 2 and "belongs to someone-else" in refused.output, refused.output
    assert "MLFLOW_EXPERIMENT_NAME" in refused.output and not _runs(uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "xover")  # asked for by name: written, and said
    shared = report(SOLO, "--format", "mlflow", "--tracking-uri", uri)
    assert shared.exit_code == 0 and "belongs to someone-else" in shared.output, shared.output
    assert len(_runs(uri)) == 2
    client.create_experiment("made-by-hand", artifact_location=artifacts)  # no owner: written into, and said
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "made-by-hand")
    untagged = report(SOLO, "--format", "mlflow", "--tracking-uri", uri)
    assert untagged.exit_code == 0 and "was not made by xover for you" in untagged.output, untagged.output
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "mine")  # made here: tagged with its owner, nothing said
    mine = report(SOLO, "--format", "mlflow", "--tracking-uri", uri)
    assert mine.exit_code == 0 and "note:" not in mine.output, mine.output
    assert client.get_experiment_by_name("mine").tags["xover.owner"] == getpass.getuser()
    again = report(SOLO, "--format", "mlflow", "--tracking-uri", uri)
    assert again.exit_code == 0 and "note:" not in again.output, again.output
