"""Scripts written with PyTorch Lightning (Trainer(strategy="ddp"), accumulate_grad_batches=2) and Hugging
Face Accelerate (gradient_accumulation_steps=2), unmodified, through every step: their engine found from
their imports, profiled through the DDP shim (gradient bytes from DDP's own all-reduces), planned beside a
built-in recipe, run from the plan taking turns and stopped at their job files' step cap, with the losses
of each script run alone under plain torchrun at every optimizer step."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import plain_torchrun

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "recipes" / "examples"
SCRIPTS = {"lightning-digits": "lightning_digits.py", "accelerate-digits": "accelerate_digits.py"}
STEPS, CAP, WARMUP = 8, 6, 2  # the scripts' own length; the job files stop them earlier, on every rank


def xover(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xover", *args], capture_output=True, text=True, timeout=timeout)


def _alone(script: Path) -> tuple[int, list[float]]:
    """Parameter bytes and per-step losses (rank 0's, as backward saw them) of the script under plain
    torchrun, no xover at all."""
    result = plain_torchrun(script, "--steps", str(STEPS))
    size = int(re.search(r"parameter bytes (\d+)", result.stdout).group(1))
    return size, [float(value) for value in re.findall(r"step \d+ loss (\S+)", result.stdout)]


def _losses(db: Path, experiment: str) -> dict[tuple[str, str], list[float]]:
    """(job, mode) -> the losses the shim recorded, one per optimizer step."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select r.name, r.mode, m.loss from iteration_metrics m join runs r on "
                                  "r.id = m.run_id where r.experiment_id = ? order by r.id, m.step",
                                  (experiment,)).fetchall()
    found: dict[tuple[str, str], list[float]] = {}
    for name, mode, loss in rows:
        found.setdefault((name, mode), []).append(loss)
    return found


@pytest.fixture(scope="module")
def framework_jobs(tmp_path_factory):
    """The two example scripts with job files of their own, each run alone under torchrun: one comparison
    serves every test below (every launch costs seconds of process starts and imports)."""
    work = tmp_path_factory.mktemp("framework-scripts")
    jobs = []
    for name, script in SCRIPTS.items():
        shutil.copy(EXAMPLES / script, work / script)
        (work / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{script}"\nargs = ["--steps", "{STEPS}"]\n'
                                           f'np = 2\niterations = {CAP}\n')
        jobs.append(str(work / f"{name}.toml"))
    alone = {name: _alone(work / script) for name, script in SCRIPTS.items()}
    for name, (_, losses) in alone.items():
        assert len(losses) == STEPS, (name, losses)
    return work, jobs, alone


def test_the_frameworks_are_told_from_the_imports():
    from xover.scripts import detect_engine

    lightning = detect_engine(EXAMPLES / "lightning_digits.py")
    assert (lightning.engine, lightning.framework, lightning.evidence) == ("torch", "PyTorch Lightning",
                                                                           "lightning.pytorch.Trainer")
    accelerate = detect_engine(EXAMPLES / "accelerate_digits.py")
    assert (accelerate.engine, accelerate.framework, accelerate.evidence) == ("torch", "Hugging Face Accelerate",
                                                                              "accelerate.Accelerator")
    trainer = detect_engine(Path(__file__).parent / "scripts" / "hf_trainer_digits.py")
    assert (trainer.engine, trainer.framework, trainer.evidence) == ("torch", "the transformers Trainer",
                                                                     "transformers.Trainer")


def test_lightning_and_accelerate_scripts_are_profiled_planned_and_run_from_the_plan_with_their_losses(
        isolated_results, framework_jobs):
    _, jobs, alone = framework_jobs
    profiled = xover("profile", *jobs, "mlp-digits", "--iterations", str(CAP), "--warmup", str(WARMUP),
                     "--no-corun", "--json")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    profiles = {p["name"]: p for p in json.loads(profiled.stdout)}
    for name in SCRIPTS:
        profile, parameter_bytes = profiles[name], alone[name][0]
        assert profile["engine"] == "torch"
        # what DDP all-reduced per optimizer step: every parameter once (not once per micro-batch)
        assert abs(profile["gradient_mb"] * 2**20 - parameter_bytes) <= 0.01 * parameter_bytes, (name, profile)
        assert profile["compute_ms"] > 0 and profile["comm_ms"] >= 0 and profile["memory_gb"] > 0
        assert profile["iterations_measured"] == CAP - WARMUP  # optimizer steps, not micro-batches

    plan_file = isolated_results / "plan.json"
    planned = xover("plan", *jobs, "mlp-digits", "--devices", "2", "--max-group", "3", "--out", str(plan_file),
                    "--json")
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(plan_file.read_text())
    assert sorted(sum((g["jobs"] for g in plan["groups"]), [])) == ["accelerate-digits", "lightning-digits",
                                                                     "mlp-digits"]
    for name in SCRIPTS:
        assert plan["jobs"][name]["script"]["engine"] == "torch" and plan["jobs"][name]["script"]["iterations"] == CAP

    # crossover only: the reference is each script alone under plain torchrun (a sequential or concurrent run
    # under xover would add three launches of Lightning and Accelerate each and no path of theirs: the shim
    # counts their steps and stops them at the cap in any mode; every mode for scripts: tests/e2e/test_ddp.py)
    ran = xover("run", str(plan_file), "--mode", "crossover", "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    assert {(j["name"], j["mode"]) for j in result["jobs"]} == {
        (name, "crossover") for name in (*SCRIPTS, "mlp-digits")}, result["jobs"]
    by_key = {(j["name"], j["mode"]): j for j in result["jobs"]}
    recorded = _losses(isolated_results / "xover.db", result["experiment"])
    for name in SCRIPTS:
        job = by_key[(name, "crossover")]
        assert job["status"] == "finished" and job["iterations"] == CAP, (name, job["error"])
        # every optimizer step's loss, bit for bit that of the script alone under torchrun
        assert recorded[(name, "crossover")] == alone[name][1][:CAP], name

    # the two scripts taking turns on the same devices, whatever the plan made of them on this machine: in
    # the plan's run where it grouped them, else as job files in an ad-hoc group
    if not any(set(SCRIPTS) <= set(group["jobs"]) for group in plan["groups"]):
        together = xover("run", "--group", *jobs, "--mode", "crossover", "--json")
        assert together.returncode == 0, together.stderr[-3000:]
        result = json.loads(together.stdout)
        by_key = {(j["name"], j["mode"]): j for j in result["jobs"]}
        recorded = _losses(isolated_results / "xover.db", result["experiment"])
        for name in SCRIPTS:
            assert recorded[(name, "crossover")] == alone[name][1][:CAP], name
    for name in SCRIPTS:
        crossover = by_key[(name, "crossover")]
        assert crossover["status"] == "finished" and crossover["policy"] is not None
        assert crossover["turn_stats"]["grants"] >= 2 * CAP  # a turn per micro-batch at least
        assert crossover["turn_stats"]["revoked"] == 0


def test_an_accelerate_script_that_builds_no_ddp_is_one_clear_error_at_profile_time(isolated_results):
    # on a CPU, Accelerate without cpu=True trains each rank alone: nothing of it is reduced, nothing can take turns
    script = isolated_results / "train.py"
    source = (EXAMPLES / "accelerate_digits.py").read_text()
    script.write_text(source.replace(", cpu=not torch.cuda.is_available()", ""))
    job = isolated_results / "job.toml"
    job.write_text('script = "train.py"\nnp = 1\nargs = ["--steps", "8"]\n')
    result = xover("profile", str(job), "--iterations", "6", "--warmup", "1", "--no-corun", timeout=300)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {job}: ") and "before any DistributedDataParallel model was built" in line, line
    assert "Hugging Face Accelerate, found from accelerate.Accelerator" in line and "cpu=True" in line, line
    assert result.stderr.strip().endswith(line)


def test_a_transformers_trainer_script_takes_turns_with_the_weights_of_the_script_alone(isolated_results):
    # the Trainer adds its own accumulation, gradient clipping and find_unused_parameters=True; each step's
    # weights are compared (its logged loss is rounded), next to a built-in recipe in crossover
    work = isolated_results / "hf"
    work.mkdir()
    shutil.copy(Path(__file__).parent / "scripts" / "hf_trainer_digits.py", work)
    alone = plain_torchrun("hf_trainer_digits.py", "--steps", str(STEPS), cwd=work)
    weights = re.findall(r"step \d+ weights \S+", alone.stdout)
    assert len(weights) == STEPS
    parameter_bytes = int(re.search(r"parameter bytes (\d+)", alone.stdout).group(1))
    job = work / "hf-trainer.toml"
    job.write_text(f'name = "hf-trainer"\nscript = "hf_trainer_digits.py"\nargs = ["--steps", "{STEPS}"]\nnp = 2\n'
                   f'iterations = {CAP}\n')
    ran = xover("run", "--group", str(job), "mlp-digits", "--iterations", str(CAP), "--mode", "crossover", "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    [trainer] = [j for j in json.loads(ran.stdout)["jobs"] if j["name"] == "hf-trainer"]
    assert trainer["status"] == "finished" and trainer["iterations"] == CAP and trainer["engine"] == "torch"
    assert trainer["gradient_bytes"] == parameter_bytes  # DDP's all-reduces per optimizer step
    assert trainer["turn_stats"]["grants"] >= 2 * CAP and trainer["turn_stats"]["revoked"] == 0
    [log] = Path(trainer["log_dir"]).glob("ranks/*/attempt_0/0/stdout.log")
    assert re.findall(r"step \d+ weights \S+", log.read_text()) == weights[:CAP]
