"""`xover report` on one real comparison run (all views: table, JSON, CSV, HTML, the list)."""

import base64
import csv
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest
from conftest import COMPARISON_ITERATIONS
from typer.testing import CliRunner

from xover.cli import app

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JOB_KEYS = {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss",
            "slowdown", "accuracy"}
ITERATION_COLUMNS = ["experiment", "run_id", "name", "mode", "policy", "step", "wall_time", "iteration_s", "data_s",
                     "compute_s", "communication_s", "wait_s", "samples", "loss", "yields", "link_s", "comm_cpu_s"]
runner = CliRunner()


def report(*args: str):
    return runner.invoke(app, ["report", *args])


@pytest.fixture
def run_env(comparison_run, monkeypatch):
    # the autouse fixture points every test at its own empty store; these tests read the session's
    # comparison run (tests/conftest.py)
    monkeypatch.setenv("XOVER_DB", comparison_run["XOVER_DB"])
    monkeypatch.setenv("XOVER_RESULTS", comparison_run["XOVER_RESULTS"])
    return comparison_run


def run_folder(run_env) -> Path:
    return Path(run_env["XOVER_RESULTS"]) / "runs" / run_env["experiment"]


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


def test_json_has_jobs_groups_parity_and_decodable_pictures(run_env):
    result = report(run_env["experiment"], "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"experiment", "jobs", "groups", "parity", "pictures"} <= set(data)
    assert data["experiment"]["id"] == run_env["experiment"] and data["experiment"]["kind"] == "run"
    assert len(data["jobs"]) == 6
    alone = {job["name"]: job["samples_per_s"] for job in data["jobs"] if job["mode"] == "sequential"}
    [group] = data["groups"]
    for job in data["jobs"]:
        assert JOB_KEYS <= set(job)
        assert job["status"] == "finished" and job["iterations"] == COMPARISON_ITERATIONS
        if group.get(f"{job['mode']}_overlap") == 0.0:  # never met past warm-up (a loaded machine): no speed shared
            assert job["slowdown"] is None and job["samples_per_s_shared"] is None
            continue
        assert job["slowdown"] > 0
        # the slowdown and the samples/s shown beside it are over one window (the jobs' overlap)
        assert job["samples_per_s_shared"] * job["slowdown"] == pytest.approx(alone[job["name"]])
    assert group["jobs"] == ["mlp-digits", "resnet-digits"]
    assert group["predicted_gain"] is None and group["gain_error_pct"] is None  # an ad-hoc group has no plan
    assert group["measured_gain"] == group["crossover_vs_sequential"] > 0 and group["model_gain"] >= 1.0
    assert 0.0 <= group["concurrent_overlap"] <= 1.0 and 0.0 < group["crossover_overlap"] <= 1.0
    assert {(p["name"], p["mode"]) for p in data["parity"]} == {
        (n, m) for n in ("mlp-digits", "resnet-digits") for m in ("concurrent", "crossover")}
    assert all(p["max_abs_loss_diff"] == 0.0 and p["steps"] == COMPARISON_ITERATIONS for p in data["parity"])
    assert set(data["pictures"]) == {"timeline", "throughput", "losses", "predicted_vs_measured"}
    for path in data["pictures"].values():
        assert Path(path).parent == run_folder(run_env)
        assert Path(path).read_bytes()[:8] == PNG_SIGNATURE
        height, width, _ = matplotlib.image.imread(path).shape
        assert height > 200 and width > 400


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
    assert len(iterations) == 6 * COMPARISON_ITERATIONS and {r["experiment"] for r in iterations} == {run_env["experiment"]}
    assert all(float(r["iteration_s"]) > 0 for r in iterations)

    stdout = report("--format", "csv")
    assert stdout.exit_code == 0
    assert len(list(csv.DictReader(io.StringIO(stdout.stdout)))) == 6  # stdout holds only the jobs CSV
    assert (run_folder(run_env) / "iterations.csv").exists()


def test_html_is_one_self_contained_file(run_env):
    result = report("--format", "html")
    assert result.exit_code == 0, result.output
    path = run_folder(run_env) / "report.html"
    assert str(path) in result.output
    page = _Page()
    page.feed(path.read_text())
    page.close()
    # jobs, groups, ways of sharing, parity, and the turns under crossover; nothing fetched from elsewhere
    assert page.tables == 5 and not page.links
    assert len(page.images) == 4
    for source in page.images:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1])[:8] == PNG_SIGNATURE


def test_all_lists_the_experiment(run_env):
    result = report("all")
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if run_env["experiment"] in line]
    assert "run" in line and "finished" in line and "sequential,concurrent,crossover" in line
    data = json.loads(report("all", "--format", "json").stdout)
    assert [e["id"] for e in data["experiments"]] == [run_env["experiment"]]


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
