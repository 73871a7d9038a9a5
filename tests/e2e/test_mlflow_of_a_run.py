"""`xover report --format mlflow` on one real comparison run (mlp-digits + resnet-digits in all three modes
through horovodrun, tests/conftest.py's comparison_run), read back with MLflow's own client from a SQLite
tracking store: the parent run and its job runs, params, metric histories, metrics, artifacts; written
twice without a duplicate."""

import sqlite3
from pathlib import Path

import pytest
from conftest import COMPARISON_ITERATIONS
from typer.testing import CliRunner

from xover.cli import app

runner = CliRunner()
JOBS = {"mlp-digits", "resnet-digits"}
MODES = {"sequential", "concurrent", "crossover"}


@pytest.fixture
def run_store(comparison_run, isolated_results, monkeypatch):
    """A copy of the session's comparison store (its own results folder: this test's pictures and HTML do not
    touch those tests/e2e/test_report_of_a_run.py reads)."""
    copy = isolated_results / "xover.db"
    source = sqlite3.connect(comparison_run["XOVER_DB"])
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    monkeypatch.setenv("XOVER_DB", str(copy))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return comparison_run["experiment"]


def _write(experiment: str, uri: str):
    result = runner.invoke(app, ["report", experiment, "--format", "mlflow", "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    return result


def test_runs_params_histories_metrics_and_artifacts_read_back_by_mlflow_and_no_duplicates(run_store, tmp_path):
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"
    (tmp_path / "mlflow").mkdir()
    first = _write(run_store, uri)
    assert f"{run_store}: wrote 6 job runs" in first.output, first.output
    assert "INFO" not in first.output

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("xover")
    assert Path(experiment.artifact_location.removeprefix("file://")) == tmp_path / "mlflow" / "mlruns"
    runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL, max_results=100)
    [parent] = [run for run in runs if run.data.tags["xover.kind"] == "experiment"]
    jobs = [run for run in runs if run.data.tags["xover.kind"] == "job"]
    assert parent.info.run_name == run_store and parent.info.status == "FINISHED"
    assert parent.data.tags["xover.experiment"] == run_store and parent.data.tags["xover.complete"] == "true"
    assert parent.data.params["kind"] == "run" and "resnet-digits" in parent.data.params["jobs"]
    # the group's gains on the parent
    # each a gain, or none where the jobs never met past warm-up (concurrent has no barrier; a loaded machine)
    metrics = parent.data.metrics
    assert metrics.get("group0.gain", 0) > 0 or metrics["group0.crossover_overlap"] == 0.0, metrics
    assert metrics.get("group0.concurrent_vs_sequential", 0) > 0 or metrics["group0.concurrent_overlap"] == 0.0, \
        metrics
    assert parent.data.metrics["group0.fluid_bound"] >= 1.0
    artifacts = {item.path for item in client.list_artifacts(parent.info.run_id)}
    assert {"report.html", "report.json", "timeline.png", "throughput.png", "losses.png"} <= artifacts
    html = Path(client.download_artifacts(parent.info.run_id, "report.html", str(tmp_path))).read_text()
    assert run_store in html and "resnet-digits" in html
    png = Path(client.download_artifacts(parent.info.run_id, "timeline.png", str(tmp_path))).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")

    # one run per job and mode, nested under the parent
    assert {(run.data.tags["xover.job"], run.data.tags["xover.mode"]) for run in jobs} == {
        (job, mode) for job in JOBS for mode in MODES}
    assert len(jobs) == 6
    for run in jobs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        assert tags["mlflow.parentRunId"] == parent.info.run_id and tags["xover.experiment"] == run_store
        assert run.info.status == "FINISHED" and run.info.start_time <= run.info.end_time
        # the recipe's fields and the run's settings as params
        assert params["recipe.name"] == tags["xover.job"] and params["recipe.np"] == "2"
        assert params["mode"] == tags["xover.mode"] and params["engine"] == "horovod"
        assert params["recipe.model"] and params["recipe.batch_size"]
        assert metrics["samples_per_s"] > 0 and metrics["iterations"] == COMPARISON_ITERATIONS
        apart = parent.data.metrics.get(f"group0.{tags['xover.mode']}_overlap") == 0.0  # never met past warm-up
        if tags["xover.mode"] != "sequential" and not apart:
            assert metrics["slowdown"] > 0 and metrics["speed_vs_alone"] > 0
            assert metrics["loss_parity.identical"] == 1.0 and metrics["loss_parity.max_abs_diff"] == 0.0
        # per-iteration histories, step = the iteration
        losses = client.get_metric_history(run.info.run_id, "loss")
        steps = client.get_metric_history(run.info.run_id, "step_time_s")
        assert len(losses) == len(steps) == COMPARISON_ITERATIONS
        assert sorted(m.step for m in losses) == list(range(1, COMPARISON_ITERATIONS + 1)) or \
            sorted(m.step for m in losses) == list(range(COMPARISON_ITERATIONS))
        assert all(m.value > 0 for m in steps)
        assert metrics["final_loss"] == pytest.approx(max(losses, key=lambda m: m.step).value)
    # crossover and sequential losses are the same per iteration (parity), read back from MLflow
    by_key = {(run.data.tags["xover.job"], run.data.tags["xover.mode"]): run.info.run_id for run in jobs}
    for job in JOBS:
        alone = sorted((m.step, m.value) for m in client.get_metric_history(by_key[job, "sequential"], "loss"))
        turns = sorted((m.step, m.value) for m in client.get_metric_history(by_key[job, "crossover"], "loss"))
        assert alone == turns

    # written again: nothing new, nothing deleted
    second = _write(run_store, uri)
    assert f"{run_store}: already in MLflow, unchanged; parent run {parent.info.run_id}" in second.output
    again = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL, max_results=100)
    assert sorted(run.info.run_id for run in again) == sorted(run.info.run_id for run in runs)
    for run in jobs:
        assert len(client.get_metric_history(run.info.run_id, "loss")) == COMPARISON_ITERATIONS
    assert len(client.list_artifacts(parent.info.run_id)) == len(artifacts)
