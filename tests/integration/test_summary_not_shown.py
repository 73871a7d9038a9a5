"""A summary stdout cannot take, after the command's work is kept. Before: `xover plan ... >&-` wrote its plan
file and stored the plan, then ended with `error: cannot write to stdout: it is closed`, exit 2, the exit of bad
input that writes nothing; so did simulate, profile, run and train once their experiment was stored, and a
report whose --out files were written. Now one warning on stderr says what is kept and the command exits as it
would have; where stdout is the result itself (--json, a report on stdout) it is still exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "assets" / "replay"


def _xover(*args, shell_redirect: str, results: Path) -> subprocess.CompletedProcess:
    """`xover ARGS`, stdout redirected as a shell would (`>&-`, `> /dev/full`)."""
    command = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", sys.executable, "-m", "xover", *map(str, args)]
    env = {**os.environ, "XOVER_RESULTS": str(results)}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _profiles(path: Path) -> Path:
    path.write_text("name,devices,compute_ms,comm_ms,memory_gb\njob0,1,10,5,1\njob1,1,11,6,1\n")
    return path


@pytest.mark.parametrize(("redirect", "why"), [(">&-", "it is closed"), ("> /dev/full", "No space left on device")])
def test_a_plan_written_whose_table_stdout_cannot_take_exits_0_and_says_so_once(tmp_path, redirect, why):
    plan = tmp_path / "plan.json"
    done = _xover(
        "--db", tmp_path / "x.db", "plan", "--profiles", _profiles(tmp_path / "p.csv"), "--devices", "1",
        "--out", plan, shell_redirect=redirect, results=tmp_path / "results",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        f"warning: the summary was not shown (cannot write to stdout: {why}); the plan was written whole to "
        f"{plan} and stored"
    )
    assert json.loads(plan.read_text())["groups"]


def test_a_plan_asked_for_as_json_on_a_closed_stdout_is_still_exit_2(tmp_path):
    plan = tmp_path / "plan.json"
    done = _xover(
        "--db", tmp_path / "x.db", "plan", "--profiles", _profiles(tmp_path / "p.csv"), "--devices", "1",
        "--out", plan, "--json", shell_redirect=">&-", results=tmp_path / "results",
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip() == "error: cannot write to stdout: it is closed"
    assert json.loads(plan.read_text())["groups"]  # written all the same


def test_a_simulation_and_its_report_files_kept_exit_0_and_a_report_on_stdout_exit_2(tmp_path):
    results, store, out = tmp_path / "results", tmp_path / "sim.db", tmp_path / "out"
    simulated = _xover(
        "--db", store, "simulate", TRACE / "fifo_srtf.csv", "--profiles", TRACE / "profiles.csv", "--cluster",
        "1x2", "--policy", "fifo", shell_redirect=">&-", results=results,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    assert "warning: the summary was not shown (cannot write to stdout: it is closed); the simulation was " \
           "stored whole, as experiment" in simulated.stderr  # fmt: skip
    files = _xover("--db", store, "report", "latest", "--format", "csv", "--out", out, shell_redirect=">&-",
                   results=results)  # fmt: skip
    assert files.returncode == 0, files.stderr
    assert sorted(path.name for path in out.iterdir()) == ["jobs.csv", "simulation.csv", "utilisation.csv"]
    on_stdout = _xover("--db", store, "report", "latest", "--format", "csv", shell_redirect=">&-", results=results)
    assert on_stdout.returncode == 2 and on_stdout.stderr.strip() == "error: cannot write to stdout: it is closed"
