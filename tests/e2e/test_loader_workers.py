"""ImageNet-style scripts as users write them, on both engines (tests/e2e/scripts/imagenet_style.py): a
Dataset that applies `nn.Module` transforms in `__getitem__`, read with DataLoader worker processes (forks
of the rank, a new set each epoch) and without, their job files' step cap on an epoch boundary. Two jobs of
each engine take turns on the same devices: each finishes at its cap, trains on the batches the script
alone trains on (the batch from the model's own forward, not from a transform), with the losses of the
script alone at every step. Before the shim followed only the rank's own model, a worker's transform took
the rank's turn and never gave it back (the group hung), and a worker forked with the cap reached exited. The
job without workers keeps each epoch's last, smaller batch: each iteration records the samples it trained on
(before, every one was counted at the first batch's size, 32 where the last step trained on 8), and every third
step it computes a held-out batch's loss with the model in eval() and gradients on (no `torch.no_grad()`, a slip
users make): that forward trains nothing, and the step after it records its own batch (before, the held-out
batch's 24 per rank)."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import plain_horovodrun, plain_torchrun, recorded_losses

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ENGINES = {"torch": ("ddp_loader_workers.py", plain_torchrun), "horovod": ("horovod_loader_workers.py", plain_horovodrun)}
EPOCHS, STEPS_PER_EPOCH, BATCH, RANKS = 2, 6, 16, 2  # 192 samples: 6 steps of 16 per rank and epoch
WORKERS = (2, 0)
# without workers, 200 samples and the last batch kept: 6 steps of 16 and one of 4 per rank and epoch, and a
# validation forward of 24 with gradients after every third step
EXTRA = {2: [], 0: ["--samples", "200", "--keep-last", "--validate-every", "3"]}
STEPS = {2: STEPS_PER_EPOCH, 0: STEPS_PER_EPOCH + 1}


def xover(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xover", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("engine", ENGINES)
def test_scripts_with_transforms_in_loader_workers_take_turns_with_the_losses_of_the_script_alone(
        isolated_results, engine):
    script, plain = ENGINES[engine]
    work = isolated_results / "jobs"
    work.mkdir()
    for name in (script, "imagenet_style.py"):
        shutil.copy(SCRIPTS / name, work / name)
    alone, batches, jobs = {}, {}, []
    for workers in WORKERS:
        args = ["--workers", str(workers), "--epochs", str(EPOCHS), *EXTRA[workers]]
        printed = plain(script, *args, cwd=work).stdout
        alone[workers] = [float(value) for value in re.findall(r"step \d+ loss (\S+)", printed)]
        batches[workers] = [int(value) for value in re.findall(r"step \d+ loss \S+ batch (\d+)", printed)]
        assert len(alone[workers]) == len(batches[workers]) == EPOCHS * STEPS[workers], printed
        job = work / f"{engine}-workers-{workers}.toml"
        job.write_text(f'name = "{engine}-workers-{workers}"\nscript = "{script}"\nnp = {RANKS}\n'
                       f'args = {json.dumps(args)}\n'
                       f'iterations = {STEPS[workers]}\n')  # the cap on the first epoch's end
        jobs.append(str(job))

    ran = xover("run", "--group", *jobs, "--mode", "crossover", "--engine", engine, "--timeout", "300", "--json")
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])
    result = json.loads(ran.stdout)
    losses = recorded_losses(isolated_results / "xover.db", result["experiment"])
    with sqlite3.connect(isolated_results / "xover.db") as connection:
        samples: dict[str, list[int]] = {}
        for name, count in connection.execute("select r.name, m.samples from iteration_metrics m join runs r on "
                                              "r.id = m.run_id where r.experiment_id = ? order by r.name, m.step",
                                              (result["experiment"],)):
            samples.setdefault(name, []).append(count)
    for workers in WORKERS:
        name = f"{engine}-workers-{workers}"
        [job] = [j for j in result["jobs"] if j["name"] == name]
        steps = STEPS[workers]
        assert job["status"] == "finished" and job["iterations"] == steps, (name, job["error"])
        assert job["turn_stats"]["revoked"] == 0 and job["turn_stats"]["grants"] >= steps
        assert losses[(name, "crossover", job["policy"])] == alone[workers][:steps], name
        # the model's batch on every rank, every step (the last of an epoch smaller where it is kept)
        assert samples[name] == [batch * RANKS for batch in batches[workers][:steps]], name
        assert batches[workers][:steps] == [BATCH] * STEPS_PER_EPOCH + ([4] if workers == 0 else []), name
        logs = "".join(path.read_text() for path in Path(job["log_dir"]).rglob("*.log"))
        assert "exited unexpectedly" not in logs and "Traceback" not in logs, name
