"""docs/extending.md's metric sink, as the page shows it: registered, named in XOVER_METRIC_SINKS, and fed
a real run's records (horovodrun), beside the store; an unknown sink is refused before anything starts."""

import csv
import os
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def example(section: str) -> str:
    import re

    text = PAGE.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)


def _xover(tmp_path, *args, sinks="loss-csv"):
    program = example("Adding a metric sink") + "\nfrom xover.cli import app\napp()\n"
    env = {**os.environ, "XOVER_METRIC_SINKS": sinks, "XOVER_RESULTS": str(tmp_path / "results"),
           "XOVER_DB": f"sqlite:///{tmp_path / 'x.db'}", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)


def test_a_sink_added_as_the_page_shows_gets_every_iteration_of_a_real_run(tmp_path):
    done = _xover(tmp_path, "train", "mlp-digits", "--iterations", "6", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    [written] = (tmp_path / "results" / "runs").glob("*/losses.csv")
    rows = list(csv.DictReader(written.open()))
    assert [int(row["step"]) for row in rows] == list(range(6))
    assert {row["job"] for row in rows} == {"mlp-digits"} and {row["mode"] for row in rows} == {"solo"}
    assert all(float(row["loss"]) > 0 for row in rows)


def test_an_unknown_sink_is_one_line_and_exit_2_before_anything_runs(tmp_path):
    refused = _xover(tmp_path, "train", "mlp-digits", "--iterations", "2", sinks="loss-csv,nowhere")
    assert refused.returncode == 2, refused.stderr
    assert "no metric sink named nowhere" in refused.stderr and "Traceback" not in refused.stderr
    assert not list((tmp_path / "results").glob("runs/*/launcher.log"))
