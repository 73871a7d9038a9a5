"""A script's outputs, kept apart per run: every run of a job (each mode of a comparison, each copy) gets a
folder of its own, `{job_dir}` in its arguments or its job file's env and XOVER_JOB_DIR, so that a script that resumes from its last
checkpoint starts from nothing in every run, as it does alone (tests/e2e/scripts/ddp_resume.py)."""

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import plain_torchrun

from xover.report.data import experiment_inputs
from xover.store.models import Experiment
from xover.store.session import open_store

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests/e2e/scripts/ddp_resume.py"
# one rank a job: what is tested is each run's folder and what the script finds in it, whatever the ranks' number
RANKS = 1
STEPS = 8
LOSS = re.compile(r"^step \d+ loss \S+$", re.MULTILINE)


def _xover_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xover", "run", "--script", SCRIPT, "--script", SCRIPT, "--np",
                           str(RANKS), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_every_run_of_a_resuming_script_writes_its_own_folder_and_keeps_the_losses_alone(isolated_results):
    out = isolated_results / "alone"
    alone = LOSS.findall(plain_torchrun(SCRIPT, "--steps", str(STEPS), "--out", str(out), fresh=out,
                                        nproc=RANKS).stdout)
    assert len(alone) == STEPS
    # two job files of the script: `{job_dir}` in its arguments, and in an environment variable it reads
    files = []
    for name, extra in (("in-args", f'args = ["--steps", "{STEPS}", "--out", "{{job_dir}}"]'),
                        ("in-env", f'args = ["--steps", "{STEPS}"]\nenv = {{ RESUME_DIR = "{{job_dir}}" }}')):
        path = isolated_results / f"{name}.toml"
        path.write_text(f'name = "{name}"\nscript = "{ROOT / SCRIPT}"\nnp = {RANKS}\n{extra}\n')
        files.append(str(path))
    # one after another: the job that runs second is the one an earlier run's checkpoint would resume
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", *files, "--mode", "sequential", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert sorted(job["name"] for job in jobs) == ["in-args", "in-env"]
    folders = set()
    for job in jobs:
        assert job["status"] == "finished" and job["iterations"] == STEPS, job
        [stdout] = Path(job["log_dir"]).glob("ranks/**/attempt_*/0/stdout.log")
        assert LOSS.findall(stdout.read_text()) == alone, (job["name"], job["mode"])  # none resumed
        folder = Path(job["log_dir"]) / "out"
        assert (folder / "last.pt").is_file()  # written where {job_dir} said, the run's own folder
        folders.add(folder)
    assert len(folders) == 2
    # a report is never written over the job files or the script the experiment ran (the script is the repo's:
    # what the report would refuse is read from the store, not tried on it)
    kept = Path(files[0]).read_text()
    report = subprocess.run([sys.executable, "-m", "xover", "report", "latest", "--format", "json", "--out", files[0]],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert report.returncode == 2 and Path(files[0]).read_text() == kept, report.stderr
    assert report.stderr.startswith(f"error: --out {files[0]}: that is a job file of experiment "), report.stderr
    with sqlite3.connect(isolated_results / "xover.db") as connection:
        [(experiment,)] = connection.execute("select id from experiments").fetchall()
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session:
        inputs = experiment_inputs(session, session.get(Experiment, experiment))
    store.close()
    assert {(str(path), what.split(" of ")[0]) for path, what in inputs} == {
        (files[0], "a job file"), (files[1], "a job file"), (str(ROOT / SCRIPT), "a script")}


def test_a_script_that_resumes_from_an_earlier_runs_checkpoint_is_told_so(isolated_results):
    """Without `{job_dir}`, the copy that runs second finds the first one's last checkpoint in the shared
    working folder and has nothing left to train: refused, with what happened and what to do."""
    out = isolated_results / "shared"
    result = _xover_run("--mode", "sequential", "--", "--steps", str(STEPS), "--out", str(out))
    said = result.stdout + result.stderr
    assert result.returncode == 1, said[-3000:]
    assert "ddp_resume#2 (sequential) failed" in said and "ended without a training step" in said, said[-3000:]
    assert "it trained in an earlier run: resumed from what that run left?" in said
    assert "{job_dir}" in said and "Traceback" not in said


def test_scripts_that_take_other_arguments_than_the_ones_shared_are_told_to_use_job_files(isolated_results):
    """One `-- ARGS` goes to every --script: a script that takes none fails with its usage error, and the run
    says what to do (a job file each), besides the failure itself."""
    other = isolated_results / "no_arguments.py"
    other.write_text("import argparse\nargparse.ArgumentParser().parse_args()\nimport torch.distributed\n")
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", SCRIPT, "--script", str(other),
                             "--np", str(RANKS), "--mode", "crossover", "--", "--steps", "2", "--out", "{job_dir}"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    said = result.stdout + result.stderr
    assert result.returncode == 1, said[-3000:]
    assert "error: unrecognized arguments: --steps 2" in said, said[-3000:]
    assert "every --script is given the same arguments" in said and "job file each" in said, said[-3000:]
