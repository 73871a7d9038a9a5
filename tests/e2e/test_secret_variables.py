"""A job file's variables and the run's metric token reach the ranks, and nothing another user can read
holds their values: no command line (`ps`), no file of the run, the store or MLflow (issue 58)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from secret_checks import (
    ARGUMENT,
    PASSED,
    SETTING,
    files_holding,
    job_file,
    logging_env,
    private_files_holding,
    run_watching_command_lines,
)


def test_a_job_files_variables_reach_horovod_ranks_through_no_command_line(isolated_results):
    """Finding 4 (for Horovod, onto `ps`). Before: horovodrun wrote each of a job file's `env` variables
    into its ranks' command lines (`env MY_SETTING=... python ...`), which every user of the host reads."""
    work = isolated_results / "work"
    work.mkdir()
    path_folder, log = logging_env(isolated_results / "bin")
    job = job_file(work, "env-check", f'env = {{ MY_SETTING = "{SETTING}" }}\n', {"MY_SETTING": SETTING})
    env = {**os.environ, "PATH": f"{path_folder}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([sys.executable, "-m", "xover", "train", str(job), "--json"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    started = log.read_text().splitlines()
    assert len([line for line in started if "HOROVOD_RANK=" in line]) == 2, started  # both ranks seen
    assert not [line for line in started if SETTING in line], started
    assert not private_files_holding(SETTING)  # each host's file is removed by its last rank


def test_the_metric_token_reaches_horovod_ranks_through_no_command_line(isolated_results):
    """Low finding: the metric token. Before: XOVER_METRIC_TOKEN was on horovodrun's rank command lines, so
    any user of the host could read it and forge the run's records."""
    path_folder, log = logging_env(isolated_results / "bin")
    env = {**os.environ, "PATH": f"{path_folder}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([sys.executable, "-m", "xover", "train", "mlp-digits", "--iterations", "8", "--json"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [job] = json.loads(run.stdout)["jobs"]
    assert job["iterations"] == 8  # records carry the token: it reached the ranks
    started = log.read_text().splitlines()
    assert len([line for line in started if "HOROVOD_RANK=" in line]) == 2, started
    assert not [line for line in started if "XOVER_METRIC_TOKEN" in line], started


@pytest.mark.parametrize("engine", ["horovod", "torch"])
def test_a_variable_passed_by_name_reaches_every_rank_and_nothing_others_read(isolated_results, engine):
    """Finding 4: `pass_env = ["HF_TOKEN"]` gives the ranks xover's own HF_TOKEN; its value is on no
    command line and in no file of the run, nor in the store, nor in MLflow. Before: no way to pass a
    variable but its value in the job file's `env`, which went into all of them."""
    work = isolated_results / "work"
    work.mkdir()
    path_folder, log = logging_env(isolated_results / "bin")
    job = job_file(work, "passed", 'pass_env = ["HF_TOKEN"]\n', {"HF_TOKEN": PASSED}, engine)
    env = {**os.environ, "HF_TOKEN": PASSED, "PATH": f"{path_folder}{os.pathsep}{os.environ['PATH']}"}
    values = [PASSED]
    run, seen = run_watching_command_lines(["train", str(job), "--json"], env, values)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not seen, seen
    if engine == "horovod":
        started = log.read_text().splitlines()
        assert len([line for line in started if "HOROVOD_RANK=" in line]) == 2, started
        assert not [line for line in started if PASSED in line], started
    mlflow = subprocess.run([sys.executable, "-m", "xover", "report", "latest", "--format", "mlflow",
                             "--tracking-uri", f"sqlite:///{isolated_results / 'mlflow.db'}"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert mlflow.returncode == 0, mlflow.stderr[-3000:]
    assert "recipe.pass_env" in sqlite_text(isolated_results / "mlflow.db")  # the name is there, not the value
    assert not files_holding(isolated_results, values)  # results, the store, MLflow's database and artifacts
    assert not private_files_holding(PASSED)


def sqlite_text(path: Path) -> str:
    return path.read_bytes().decode(errors="replace")


def test_a_job_files_env_values_are_in_no_file_of_the_run_nor_the_store_nor_mlflow(isolated_results):
    """Finding 4: a job file's `env` value reaches the ranks, and the run's spec.json (mode 0644), its
    logs, the store and MLflow's params hold its name only. Before: the value was in all of them
    (`recipe.env.MY_TOKEN` in MLflow). The same for the script's own credential options (`--api-key KEY`,
    `--wandb-key=KEY`): before, they were in spec.json, the store and MLflow as given."""
    work = isolated_results / "work"
    work.mkdir()
    options = ("--api-key", ARGUMENT, f"--wandb-key={ARGUMENT}2", "--seed", "3")
    job = job_file(work, "env-values", f'env = {{ MY_TOKEN = "{SETTING}" }}\n', {"MY_TOKEN": SETTING},
                   options=options)
    run = subprocess.run([sys.executable, "-m", "xover", "train", str(job), "--json"], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [spec] = (isolated_results / "results").rglob("spec.json")
    assert json.loads(spec.read_text())["recipe"]["env"] == {"MY_TOKEN": "***"}
    assert json.loads(spec.read_text())["recipe"]["args"][-5:] == ["--api-key", "***", "--wandb-key=***", "--seed", "3"]
    mlflow = subprocess.run([sys.executable, "-m", "xover", "report", "latest", "--format", "mlflow",
                             "--tracking-uri", f"sqlite:///{isolated_results / 'mlflow.db'}"],
                            capture_output=True, text=True, timeout=300)
    assert mlflow.returncode == 0, mlflow.stderr[-3000:]
    assert "recipe.env.MY_TOKEN" in (isolated_results / "mlflow.db").read_bytes().decode(errors="replace")
    files = [path for path in files_holding(isolated_results, [SETTING, ARGUMENT]) if not path.endswith(".toml")]
    assert not files, files  # only the job file itself holds it


STRICT_SCRIPT = '''
import argparse, os, sys
# what scripts do when they fail: say their settings, and argparse repeats the arguments it does not know
print("settings:", os.environ.get("MY_TOKEN"), os.environ.get("HF_TOKEN"), os.environ.get("XOVER_METRIC_TOKEN"),
      file=sys.stderr)
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.parse_args()
'''


def test_a_failed_jobs_error_that_repeats_its_secrets_is_kept_without_them(isolated_results):
    """A probe (2026-12-06): a script with argparse's strict `parse_args()`, given `--wandb-key KEY`, failed with
    'unrecognized arguments: --wandb-key KEY', and that line, kept as the failure's reason, put the key in the
    store, every report, `train --json` and MLflow; launcher.log and Horovod's rank logs (0644) had it and the
    `env` value the script printed. Now the error and launcher.log show them as ***, and the ranks' own output,
    as they wrote it, is in a folder of its user's alone."""
    work = isolated_results / "work"
    work.mkdir()
    (work / "strict.py").write_text(STRICT_SCRIPT)
    job = work / "strict.toml"
    job.write_text(f'name = "strict"\nscript = "strict.py"\nengine = "horovod"\nnp = 2\niterations = 3\n'
                   f'args = ["--steps", "3", "--wandb-key", "{ARGUMENT}", "--db-password={ARGUMENT}2"]\n'
                   f'env = {{ MY_TOKEN = "{SETTING}" }}\npass_env = ["HF_TOKEN"]\n')
    env = {**os.environ, "HF_TOKEN": PASSED}
    values = [SETTING, ARGUMENT, PASSED]
    run = subprocess.run([sys.executable, "-m", "xover", "train", str(job), "--json"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode != 0 and "unrecognized arguments: --wandb-key *** --db-password=***" in run.stdout, (
        run.stdout[-3000:] + run.stderr[-3000:])
    [launcher_log] = (isolated_results / "results").rglob("launcher.log")
    assert "settings: *** *** ***" in launcher_log.read_text(), launcher_log.read_text()
    for form in ("json", "html"):
        report = subprocess.run([sys.executable, "-m", "xover", "report", "latest", "--format", form, "--out",
                                 str(isolated_results / f"report.{form}")], capture_output=True, text=True, env=env,
                                timeout=300)
        assert report.returncode == 0, report.stderr[-3000:]
    assert "unrecognized arguments: --wandb-key ***" in (isolated_results / "report.json").read_text()
    rank_logs = launcher_log.parent / "ranks"
    assert rank_logs.stat().st_mode & 0o777 == 0o700
    holding = [Path(path) for path in files_holding(isolated_results, values) if not path.endswith(".toml")]
    assert holding and all(rank_logs in path.parents for path in holding), holding  # the store's file among none
    assert not any(value in run.stdout + run.stderr for value in values)
