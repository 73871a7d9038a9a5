"""An unmodified script that evaluates its model at the end of every epoch (tests/e2e/scripts/ddp_loader_workers.py
--evaluate: forwards without gradients over a held-out set, a dist.all_reduce of the correct answers). xover
tells the iteration its evaluation held up (`evaluation_s`, from its first forward without gradients to the next
forward with them) without a word from the script, alone and taking turns, which is what lets an adaptive group
leave that iteration out of its probe windows (run/adaptive.py, `held_by_evaluation`); the evaluation changes
no loss, and evaluates what it does under plain torchrun: one job through DDP's forward, the other through
model.module, each rank with its own BatchNorm statistics (before, xover broadcast rank 0's ahead of the next
forward, once the step's all-reduces ended, and the second job's held-out loss was another)."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import plain_torchrun, recorded_losses

SCRIPTS = Path(__file__).resolve().parent / "scripts"
EPOCHS, STEPS_PER_EPOCH = 2, 6  # 192 samples: 6 steps of 16 per rank and epoch
EVALUATION = re.compile(r"^epoch \d+ accuracy \S+ held-out loss \S+$", re.MULTILINE)


def test_a_scripts_own_evaluation_is_told_in_the_iteration_it_held_up(isolated_results):
    work = isolated_results / "jobs"
    work.mkdir()
    for name in ("ddp_loader_workers.py", "imagenet_style.py"):
        shutil.copy(SCRIPTS / name, work / name)
    arguments = {name: ["--workers", "0", "--epochs", str(EPOCHS), "--evaluate", *extra]
                 for name, extra in (("first", []), ("second", ["--evaluate-module"]))}
    alone, evaluated = {}, {}
    for name, args in arguments.items():
        printed = plain_torchrun("ddp_loader_workers.py", *args, cwd=work).stdout
        alone[name] = [float(value) for value in re.findall(r"step \d+ loss (\S+)", printed)]
        evaluated[name] = EVALUATION.findall(printed)
        assert len(alone[name]) == EPOCHS * STEPS_PER_EPOCH and len(evaluated[name]) == EPOCHS, printed
    assert alone["first"] == alone["second"] and evaluated["first"] != evaluated["second"]
    jobs = []
    for name in ("first", "second"):
        job = work / f"{name}.toml"
        job.write_text(f'name = "{name}"\nscript = "ddp_loader_workers.py"\nnp = 2\nargs = {json.dumps(arguments[name])}\n'
                       f"iterations = {EPOCHS * STEPS_PER_EPOCH}\n")
        jobs.append(str(job))

    ran = subprocess.run([sys.executable, "-m", "xover", "run", "--group", *jobs, "--mode", "sequential,crossover",
                          "--engine", "torch", "--timeout", "300", "--json"], capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])
    result = json.loads(ran.stdout)
    assert all(job["status"] == "finished" for job in result["jobs"]), result["jobs"]
    with sqlite3.connect(isolated_results / "xover.db") as connection:
        rows = connection.execute("select r.name, r.mode, m.step, m.evaluation_s, m.iteration_s from iteration_metrics m "
                                  "join runs r on r.id = m.run_id where r.experiment_id = ?",
                                  (result["experiment"],)).fetchall()
    held = {(name, mode): [] for name, mode, *_ in rows}
    for name, mode, step, evaluation_s, iteration_s in rows:
        if evaluation_s is not None:
            held[(name, mode)].append(step)
            assert 0 < evaluation_s < iteration_s, (name, mode, step)
    # the held-out set (640 images) takes longer than a step of 16: the first step of the second epoch
    assert held == {key: [STEPS_PER_EPOCH] for key in held} and len(held) == 4, held
    for (name, mode, _), losses in recorded_losses(isolated_results / "xover.db", result["experiment"]).items():
        assert losses == alone[name], (name, mode)
    for job in result["jobs"]:
        [stdout] = Path(job["log_dir"]).glob("ranks/**/attempt_*/0/stdout.log")
        # `iterations` stops the script at the training forward after its last step: the last epoch's evaluation
        # is made, as alone (before, the cap stopped it at the evaluation's forward, without it)
        assert EVALUATION.findall(stdout.read_text()) == evaluated[job["name"]], (job["name"], job["mode"])
