"""`xover report`: on one real comparison run (all views), on a hand-made store (the figures), and its errors."""

import base64
import csv
import io
import json
import os
import subprocess
import sys
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from xover.cli import app
from xover.report.timeline import intervals_in_window, iteration_intervals, middle_window, overlap_fraction
from xover.store.models import Experiment, IterationMetric, Plan, PlanGroup, Profile, RecipeSnapshot, Run
from xover.store.session import open_store

ROOT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JOB_KEYS = {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss",
            "slowdown", "accuracy"}
ITERATION_COLUMNS = ["experiment", "run_id", "name", "mode", "policy", "step", "wall_time", "iteration_s", "data_s",
                     "compute_s", "communication_s", "wait_s", "samples", "loss", "yields", "link_s", "comm_cpu_s"]
runner = CliRunner()


def report(*args: str):
    return runner.invoke(app, ["report", *args])


# ------------------------------------------------------------------------------ one real comparison run


@pytest.fixture(scope="module")
def comparison_run(tmp_path_factory):
    """mlp-digits + resnet-digits in all three modes through the real CLI, once for the module."""
    folder = tmp_path_factory.mktemp("report")
    paths = {"XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "resnet-digits",
                             "--mode", "all", "--iterations", "10", "--json"], env={**os.environ, **paths},
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {**paths, "experiment": json.loads(result.stdout)["experiment"], "folder": folder}


@pytest.fixture
def run_env(comparison_run, monkeypatch):
    # the autouse fixture points every test at its own empty store; these tests read the module's run
    monkeypatch.setenv("XOVER_DB", comparison_run["XOVER_DB"])
    monkeypatch.setenv("XOVER_RESULTS", comparison_run["XOVER_RESULTS"])
    return comparison_run


def run_folder(run_env) -> Path:
    return Path(run_env["XOVER_RESULTS"]) / "runs" / run_env["experiment"]


@pytest.mark.e2e
def test_table_shows_every_job_and_mode_gains_parity_and_pictures(run_env):
    result = report()  # latest
    assert result.exit_code == 0, result.output
    out = result.output
    assert run_env["experiment"] in out
    for text in ("mlp-digits", "resnet-digits", "sequential", "concurrent", "crossover", "samples/s together",
                 "slowdown vs alone", "predicted gain", "measured gain", "error %", "accuracy parity"):
        assert text in out, text
    parity_lines = [line for line in out.splitlines() if "crossover" in line and " 0.0 " in line and "yes" in line]
    assert len(parity_lines) == 2, out  # both jobs: identical losses alone and under crossover
    for name in ("timeline", "throughput", "losses", "predicted_vs_measured"):
        assert f"{name}: {run_folder(run_env) / (name + '.png')}" in out


@pytest.mark.e2e
def test_json_has_jobs_groups_parity_and_decodable_pictures(run_env):
    result = report(run_env["experiment"], "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"experiment", "jobs", "groups", "parity", "pictures"} <= set(data)
    assert data["experiment"]["id"] == run_env["experiment"] and data["experiment"]["kind"] == "run"
    assert len(data["jobs"]) == 6
    alone = {job["name"]: job["samples_per_s"] for job in data["jobs"] if job["mode"] == "sequential"}
    for job in data["jobs"]:
        assert JOB_KEYS <= set(job)
        assert job["status"] == "finished" and job["iterations"] == 10 and job["slowdown"] > 0
        # the slowdown and the samples/s shown beside it are over one window (the jobs' overlap)
        assert job["samples_per_s_shared"] * job["slowdown"] == pytest.approx(alone[job["name"]])
    [group] = data["groups"]
    assert group["jobs"] == ["mlp-digits", "resnet-digits"]
    assert group["predicted_gain"] is None and group["gain_error_pct"] is None  # an ad-hoc group has no plan
    assert group["measured_gain"] == group["crossover_vs_sequential"] > 0 and group["model_gain"] >= 1.0
    assert 0.0 <= group["concurrent_overlap"] <= 1.0 and 0.0 < group["crossover_overlap"] <= 1.0
    assert {(p["name"], p["mode"]) for p in data["parity"]} == {
        (n, m) for n in ("mlp-digits", "resnet-digits") for m in ("concurrent", "crossover")}
    assert all(p["max_abs_loss_diff"] == 0.0 and p["steps"] == 10 for p in data["parity"])
    assert set(data["pictures"]) == {"timeline", "throughput", "losses", "predicted_vs_measured"}
    for path in data["pictures"].values():
        assert Path(path).parent == run_folder(run_env)
        assert Path(path).read_bytes()[:8] == PNG_SIGNATURE
        height, width, _ = matplotlib.image.imread(path).shape
        assert height > 200 and width > 400


@pytest.mark.e2e
def test_csv_to_a_folder_and_to_stdout(run_env, tmp_path):
    result = report("--format", "csv", "--out", str(tmp_path / "csv"))
    assert result.exit_code == 0, result.output
    with open(tmp_path / "csv" / "jobs.csv", newline="") as jobs_file:
        jobs = list(csv.DictReader(jobs_file))
    assert len(jobs) == 6 and JOB_KEYS <= set(jobs[0])
    assert {(j["name"], j["mode"]) for j in jobs} == {
        (n, m) for n in ("mlp-digits", "resnet-digits") for m in ("sequential", "concurrent", "crossover")}
    assert all(float(j["samples_per_s"]) > 0 for j in jobs)
    with open(tmp_path / "csv" / "iterations.csv", newline="") as iterations_file:
        reader = csv.DictReader(iterations_file)
        iterations = list(reader)
    assert reader.fieldnames == ITERATION_COLUMNS
    assert len(iterations) == 60 and {r["experiment"] for r in iterations} == {run_env["experiment"]}
    assert all(float(r["iteration_s"]) > 0 for r in iterations)

    stdout = report("--format", "csv")
    assert stdout.exit_code == 0
    assert len(list(csv.DictReader(io.StringIO(stdout.stdout)))) == 6  # stdout holds only the jobs CSV
    assert (run_folder(run_env) / "iterations.csv").exists()


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes["src"])
        if tag in ("link", "script", "a") and (attributes.get("href") or attributes.get("src")):
            self.links.append(attributes.get("href") or attributes.get("src"))
        self.tables += tag == "table"


@pytest.mark.e2e
def test_html_is_one_self_contained_file(run_env):
    result = report("--format", "html")
    assert result.exit_code == 0, result.output
    path = run_folder(run_env) / "report.html"
    assert str(path) in result.output
    page = _Page()
    page.feed(path.read_text())
    page.close()
    assert page.tables == 3 and not page.links  # jobs, groups, parity; nothing fetched from elsewhere
    assert len(page.images) == 4
    for source in page.images:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1])[:8] == PNG_SIGNATURE


@pytest.mark.e2e
def test_all_lists_the_experiment(run_env):
    result = report("all")
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if run_env["experiment"] in line]
    assert "run" in line and "finished" in line and "sequential,concurrent,crossover" in line
    data = json.loads(report("all", "--format", "json").stdout)
    assert [e["id"] for e in data["experiments"]] == [run_env["experiment"]]


# ------------------------------------------------------------------------------ a hand-made store


def _hand_made_store(db: Path) -> None:
    """Job a: 30 ms compute + 10 ms all-reduce; job b: 10 + 30. Alone each takes 40 ms an iteration;
    taking turns both finish an iteration every 40 ms, so the gain is 2.0 (the model says 2.0 too).
    The plan predicted 1.6; b's loss under crossover drifts by 0.5 at step 3."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
        plan = Plan(algo="matching", body={}, predicted_aggregate_gain=1.6)
        session.add_all([recipe, plan])
        session.flush()
        session.add(PlanGroup(plan_id=plan.id, index=0, jobs=["a", "b"], devices=[], wave=0,
                              predicted_period_ms=50.0, predicted_gain=1.6))
        session.add(Experiment(id="20260101-000000-plan", kind="run", command="xover run plan.json",
                               status="finished", plan_id=plan.id))
        session.add(Experiment(id="20260101-000100-solo", kind="train", command="xover train a", status="finished"))
        runs = [("20260101-000000-plan", name, mode) for mode in ("sequential", "crossover") for name in ("a", "b")]
        runs.append(("20260101-000100-solo", "a", "solo"))
        for experiment, name, mode in runs:
            run = Run(experiment_id=experiment, recipe_id=recipe.id, name=name, mode=mode,
                      group_index=None if mode == "solo" else 0,
                      slot=("a", "b").index(name) if mode == "crossover" else None,
                      hosts="localhost:2", np=2, status="finished", exit_code=0)
            session.add(run)
            session.flush()
            compute, communication = (0.030, 0.010) if name == "a" else (0.010, 0.030)
            wait = 0.0 if mode != "crossover" else (0.010 if name == "a" else 0.0)
            for step in range(10):
                loss = 2.0 - 0.1 * step + (0.5 if (name, mode, step) == ("b", "crossover", 3) else 0.0)
                session.add(IterationMetric(run_id=run.id, step=step, time_s=0.04 * (step + 1),
                                            wall_time=1000.0 + 0.04 * (step + 1), iteration_s=0.04, data_s=0.0,
                                            compute_s=compute, communication_s=communication - wait, wait_s=wait,
                                            samples=64, loss=loss))
    store.close()


def test_gains_error_and_parity_from_a_plan(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    result = report("plan", "--format", "json")  # the end of an id is enough
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [group] = data["groups"]
    assert group["predicted_gain"] == pytest.approx(1.6)
    assert group["measured_gain"] == pytest.approx(2.0)
    assert group["model_gain"] == pytest.approx(2.0)
    assert group["gain_error_pct"] == pytest.approx(25.0)
    parity = {p["name"]: p for p in data["parity"]}
    assert parity["a"]["max_abs_loss_diff"] == 0.0 and parity["a"]["identical"]
    assert parity["b"]["max_abs_loss_diff"] == pytest.approx(0.5) and not parity["b"]["identical"]
    assert "losses" in data["pictures"] and "predicted_vs_measured" in data["pictures"]


def test_a_run_alone_off_its_profile_is_flagged(isolated_results):
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = session.scalars(select(RecipeSnapshot)).first()
        for name, compute_ms, created in (("a", 20.0, datetime(2025, 1, 1)), ("b", 10.0, datetime(2025, 1, 1)),
                                          ("b", 5.0, datetime(2030, 1, 1))):  # taken after the run: not its profile
            session.add(Profile(recipe_id=recipe.id, recipe_hash="h", name=name, np=2, bandwidth="host",
                                hardware="x", iterations=10, data_ms=0.0, compute_ms=compute_ms, comm_ms=10.0,
                                iteration_ms=compute_ms + 10.0, samples_per_s=1.0, memory_gb=0.1, gradient_bytes=1,
                                link_ms=None, comm_cpu_ms=None, checkpoints=None, spread={}, created_at=created))
    store.close()
    [group] = json.loads(report("plan", "--format", "json").stdout)["groups"]
    assert group["alone_vs_profile"] == {"a": pytest.approx(1.5), "b": pytest.approx(1.0)}
    output = " ".join(report("plan").output.split())  # the table wraps long lines
    assert "a's run alone needed 50% more device time per iteration than its profile" in output
    assert "b's run alone" not in output


def test_train_experiment_shows_job_rows_only(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    result = report()  # latest: the train experiment, created last
    assert result.exit_code == 0, result.output
    assert "20260101-000100-solo" in result.output and "solo" in result.output
    assert "accuracy parity" not in result.output and "measured gain" not in result.output
    assert "losses:" in result.output and "timeline:" not in result.output
    summary = report("all", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(summary.stdout)))
    assert [r["id"] for r in rows] == ["20260101-000100-solo", "20260101-000000-plan"]  # newest first
    assert float(rows[1]["best_crossover_gain"]) == pytest.approx(2.0)


# ------------------------------------------------------------------------------ errors


def _one_error_line(result, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:")
    for text in expected:
        assert text in line, line


def test_missing_or_empty_database_and_unknown_id_exit_2(isolated_results):
    _one_error_line(report(), "no database at", "xover train")
    assert not (isolated_results / "xover.db").exists()  # reporting creates no database
    open_store(str(isolated_results / "xover.db")).close()
    _one_error_line(report(), "holds no experiments yet")
    _one_error_line(report("all"), "holds no experiments yet")
    _hand_made_store(isolated_results / "other.db")
    _one_error_line(runner.invoke(app, ["--db", str(isolated_results / "other.db"), "report", "nothing-like-this"]),
                    "no experiment 'nothing-like-this'", "xover report all")
    _one_error_line(runner.invoke(app, ["--db", str(isolated_results / "other.db"), "report", "2026"]),
                    "matches 2 experiments")


def test_bad_format_and_out_exit_2():
    _one_error_line(report("--format", "xml"), "--format xml", "table, json, csv, html")
    _one_error_line(report("--out", "x.txt"), "--out")


# ------------------------------------------------------------------------------ the timeline's arithmetic


def _row(end: float, iteration: float, communication: float, wait: float, compute: float, data: float = 0.0):
    return {"wall_time": end, "iteration_s": iteration, "communication_s": communication, "wait_s": wait,
            "compute_s": compute, "data_s": data}


def test_iteration_splits_into_communication_then_turn_wait_then_compute():
    intervals = iteration_intervals(_row(end=10.0, iteration=1.0, communication=0.2, wait=0.5, compute=0.25,
                                         data=0.05))
    assert [(i.phase, round(i.start, 6), round(i.end, 6)) for i in intervals] == [
        ("communication", 9.0, 9.2), ("turn wait", 9.2, 9.7), ("compute", 9.7, 10.0)]
    # phases that took no time are left out
    assert [i.phase for i in iteration_intervals(_row(5.0, 0.1, 0.0, 0.0, 0.1))] == ["compute"]


def test_window_skips_start_up_skew_and_cuts_intervals():
    # job a waited 30 s for its partner's first turn at step 1; both then alternate every 0.1 s
    a = [_row(1.0, 1.0, 0, 0, 1.0), _row(31.0, 30.0, 0, 29.95, 0.05)] + \
        [_row(31.0 + 0.1 * k, 0.1, 0, 0.05, 0.05) for k in range(1, 20)]
    b = [_row(30.95 + 0.1 * k, 0.1, 0, 0.05, 0.05) for k in range(20)]
    (low, high), when = middle_window([a, b], iterations=8)
    assert when == "steady" and high - low == pytest.approx(0.8) and low > 31.0
    cut = intervals_in_window(a, (low, high))
    assert min(i.start for i in cut) >= low and max(i.end for i in cut) <= high
    assert sum(i.end - i.start for i in cut) == pytest.approx(0.8)


def test_overlap_says_how_much_of_the_time_jobs_ran_together():
    first = [_row(1.0 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]  # iterating from 0.9 to 1.9 s
    later = [_row(1.5 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]  # from 1.4 to 2.4 s
    assert overlap_fraction([first, later]) == pytest.approx(0.5 / 1.5)
    apart = [_row(5.0 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]
    assert overlap_fraction([first, apart]) == 0.0
    (low, high), when = middle_window([first, apart])
    assert when == "apart" and high - low == pytest.approx(0.8)
    assert overlap_fraction([first]) is None


def test_the_model_from_a_run_alone_yields_at_its_layer_boundaries():
    from xover.analysis import profile_of_run

    job = {"name": "a", "np": 2, "compute_ms": 90.0, "data_ms": 10.0, "communication_ms": 20.0,
           "hosts": "localhost:2", "gradient_bytes": None, "comm_cpu_ms": None}
    # 50 layer boundaries in 100 ms of device time: it can give a turn up every 2 ms, as its profile says
    assert profile_of_run({**job, "checkpoints": 50}, "1gbit").checkpoint_ms == pytest.approx(2.0)
    assert profile_of_run({**job, "checkpoints": None}, "1gbit").checkpoint_ms == 1.0  # not recorded: the default


@pytest.mark.parametrize("target", ["all", "latest", "nosuchexperiment"])
def test_an_empty_store_is_named_without_its_password(isolated_results, monkeypatch, target):
    import xover.report as reporting

    store = open_store(str(isolated_results / "empty.db"))
    store.url = "postgresql://xover:s3cret-pw@db.example:5432/xover"  # as a PostgreSQL store would be named
    monkeypatch.setattr(reporting, "open_existing_store", lambda db: store)
    with pytest.raises(reporting.ReportError) as refused:
        reporting.make_report(None, target, "table", None)
    assert "s3cret-pw" not in str(refused.value)
    assert "postgresql://xover:***@db.example:5432/xover" in str(refused.value)
