"""`xover report` on one real small comparison run: table, JSON, CSV, PNGs, HTML, and the errors."""

import csv
import html.parser
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """One real run (sequential, concurrent, crossover) through the CLI, shared by the tests below."""
    folder = tmp_path_factory.mktemp("report")
    env = dict(os.environ, XOVER_DB=str(folder / "xover.db"), XOVER_RESULTS=str(folder / "results"))
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "resnet-digits",
                             "--mode", "all", "--iterations", "10", "--json"], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return env, json.loads(result.stdout)["experiment"], folder


def _report(env, *args):
    return subprocess.run([sys.executable, "-m", "xover", "report", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def test_table_shows_jobs_gains_parity_and_pictures(comparison):
    env, experiment, folder = comparison
    result = _report(env, experiment)
    assert result.returncode == 0, result.stderr
    for words in ("mlp-digits", "resnet-digits", "sequential", "concurrent", "crossover", "measured gain",
                  "accuracy parity", "timeline.png"):
        assert words in result.stdout
    for name in ("timeline", "throughput", "losses", "predicted_vs_measured"):
        png = folder / "results" / "runs" / experiment / f"{name}.png"
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000
        import matplotlib.image

        assert matplotlib.image.imread(png).shape[0] > 100  # it decodes


def test_json_has_the_keys_scripts_use(comparison):
    env, experiment, _ = comparison
    report = json.loads(_report(env, "latest", "--format", "json").stdout)
    assert report["experiment"]["id"] == experiment
    assert len(report["jobs"]) == 6
    for job in report["jobs"]:
        assert {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss",
                "slowdown", "accuracy"} <= set(job)
    [group] = report["groups"]
    assert group["measured_gain"] > 0 and group["model_gain"] > 0
    assert all(p["identical"] for p in report["parity"])  # crossover changed no loss, to the last bit
    assert set(report["pictures"]) == {"timeline", "throughput", "losses", "predicted_vs_measured"}


def test_csv_exports(comparison, tmp_path):
    env, experiment, _ = comparison
    result = _report(env, experiment, "--format", "csv", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "jobs.csv") as handle:
        jobs = list(csv.DictReader(handle))
    assert len(jobs) == 6 and {"name", "mode", "samples_per_s", "final_loss"} <= set(jobs[0])
    with open(tmp_path / "iterations.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 60
    assert {"step", "compute_s", "communication_s", "wait_s", "loss"} <= set(rows[0])


class _Images(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources, self.tables = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])
        self.tables += tag == "table"


def test_html_is_self_contained(comparison, tmp_path):
    env, experiment, _ = comparison
    page = tmp_path / "r.html"
    assert _report(env, experiment, "--format", "html", "--out", str(page)).returncode == 0
    parser = _Images()
    parser.feed(page.read_text())
    assert parser.tables >= 2
    assert len(parser.sources) == 4 and all(s.startswith("data:image/png;base64,") for s in parser.sources)


def test_all_lists_experiments(comparison):
    env, experiment, _ = comparison
    result = _report(env, "all")
    assert result.returncode == 0 and experiment in result.stdout


def test_unknown_run_and_empty_database_exit_2(comparison, tmp_path):
    env, _, _ = comparison
    unknown = _report(env, "no-such-run")
    assert unknown.returncode == 2 and "no experiment 'no-such-run'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    empty = _report(dict(env, XOVER_DB=str(tmp_path / "none.db")))
    assert empty.returncode == 2 and "nothing has been run yet" in empty.stderr
    bad_format = _report(env, "--format", "pdf")
    assert bad_format.returncode == 2 and "--format" in bad_format.stderr
