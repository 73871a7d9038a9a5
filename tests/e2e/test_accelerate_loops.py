"""Hugging Face Accelerate and transformers Trainer loops as users write them, taking turns beside each
other with the losses (or weights) of each script alone at every optimizer step: the forward of the
prepared model with gradients and no backward after it (accuracy on the training batch, gathered: the
loop of shared/repro/accelerate_gather.py, whose losses changed from run to run under xover), evaluation
loops with gather_for_metrics with and without gradients, dropout, clipping through the accelerator, and
accumulation of 2, 3 and 4 micro-batches; the Trainer with its own evaluation every few steps."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import plain_torchrun, recorded_losses

SCRIPTS = Path(__file__).resolve().parent / "scripts"
LOOPS = {
    "train-batch-accuracy": ["--accumulate", "2", "--evaluate", "train-batch"],
    "evaluation-with-gradients": ["--accumulate", "4", "--evaluate", "loop", "--eval-with-grad"],
    "dropout-clipping-evaluation": ["--accumulate", "3", "--dropout", "0.1", "--clip", "1.0", "--evaluate", "loop"],
}
TRAINER = ["--steps", "8", "--accumulate", "3", "--eval-every", "3"]


def xover(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xover", *args], capture_output=True, text=True, timeout=timeout)


def _job(work: Path, name: str, script: str, args: list[str]) -> str:
    path = work / f"{name}.toml"
    path.write_text(f'name = "{name}"\nscript = "{script}"\nnp = 2\nargs = {json.dumps(args)}\n')
    return str(path)


def _rank0_output(job: dict) -> str:
    [log] = Path(job["log_dir"]).glob("ranks/*/attempt_0/0/stdout.log")
    return log.read_text()


@pytest.fixture
def work(isolated_results):
    work = isolated_results / "jobs"
    work.mkdir()
    for script in ("accelerate_loops.py", "accelerate_gather.py", "hf_trainer_digits.py"):
        shutil.copy(SCRIPTS / script, work / script)
    return work


def test_accelerate_loops_with_forwards_that_no_backward_follows_keep_their_losses_at_every_step(work,
                                                                                                 isolated_results):
    alone = {}
    for name, args in LOOPS.items():
        printed = plain_torchrun("accelerate_loops.py", *args, cwd=work).stdout
        alone[name] = ([float(value) for value in re.findall(r"step \d+ loss (\S+)", printed)],
                       re.findall(r"epoch \d+ .*accuracy \S+", printed))
    jobs = [_job(work, name, "accelerate_loops.py", args) for name, args in LOOPS.items()]
    ran = xover("run", "--group", *jobs, "--mode", "crossover", "--timeout", "400", "--json")
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])
    result = json.loads(ran.stdout)
    losses = recorded_losses(isolated_results / "xover.db", result["experiment"])
    for job in result["jobs"]:
        name = job["name"]
        assert job["status"] == "finished", (name, job["error"])
        assert losses[(name, "crossover", job["policy"])] == alone[name][0], name
        assert re.findall(r"epoch \d+ .*accuracy \S+", _rank0_output(job)) == alone[name][1], name


def test_the_reported_accelerate_script_and_a_trainer_that_evaluates_match_their_runs_alone(work):
    gather = plain_torchrun("accelerate_gather.py", "--epochs", "2", cwd=work).stdout
    trainer = plain_torchrun("hf_trainer_digits.py", *TRAINER, cwd=work).stdout
    expected = {"accelerate-gather": re.findall(r"^(?:acc|Loss:) .*$", gather, re.MULTILINE),
                "hf-trainer-eval": re.findall(r"^step \d+ (?:eval loss|weights) \S+$", trainer, re.MULTILINE)}
    assert len(expected["accelerate-gather"]) == 2 and len(expected["hf-trainer-eval"]) == 8 + 3
    jobs = [_job(work, "accelerate-gather", "accelerate_gather.py", ["--epochs", "2"]),
            _job(work, "hf-trainer-eval", "hf_trainer_digits.py", TRAINER)]
    ran = xover("run", "--group", *jobs, "--mode", "crossover", "--timeout", "400", "--json")
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])
    result = json.loads(ran.stdout)
    for job in result["jobs"]:
        assert job["status"] == "finished", (job["name"], job["error"])
        pattern = r"^(?:acc|Loss:) .*$" if job["name"] == "accelerate-gather" else r"^step \d+ (?:eval loss|weights) \S+$"
        assert re.findall(pattern, _rank0_output(job), re.MULTILINE) == expected[job["name"]], job["name"]
    # the Trainer's evaluations (after its steps 3 and 6), told in the iterations they held up: the 4th and 7th
    with sqlite3.connect(work.parent / "xover.db") as connection:
        held = connection.execute("SELECT m.step FROM iteration_metrics m JOIN runs r ON r.id = m.run_id WHERE "
                                  "r.experiment_id = ? AND r.name = 'hf-trainer-eval' AND m.evaluation_s > 0 "
                                  "ORDER BY m.step", (result["experiment"],)).fetchall()
    assert [step for (step,) in held] == [3, 6]
