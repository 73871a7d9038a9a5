"""Users' own scripts through every step: profiled (through the shims that run them), planned beside a
built-in recipe, run from the plan in every mode with the losses of the script run alone, refused when
changed since profiled; and what a shim cannot follow is one clear error at profile time."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import plain_torchrun

from xover.recipes import load_recipe
from xover.run.targets import groups_from_plan

SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent
DDP_STEPS, DDP_CAP, HOROVOD_STEPS = 12, 10, 12
DDP_OVERFLOW = 3  # the GradScaler skips this step: still an iteration (the cap counts it), with its own loss


def xover(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xover", *args], capture_output=True, text=True, timeout=timeout)


def _printed(text: str) -> tuple[int, list[float]]:
    """Parameter bytes and per-step losses a script printed (rank 0)."""
    size = int(re.search(r"parameter bytes (\d+)", text).group(1))
    return size, [float(value) for value in re.findall(r"step \d+ loss (\S+)", text)]


def _alone(tmp_path: Path) -> dict[str, tuple[int, list[float]]]:
    """Each script run plainly, with its own launcher and no xover at all."""
    ddp = plain_torchrun(tmp_path / "ddp_accumulate.py", "--steps", str(DDP_STEPS), "--overflow-at", str(DDP_OVERFLOW))
    horovod = subprocess.run([str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", sys.executable,
                              str(tmp_path / "horovod_passes.py"), "--steps", str(HOROVOD_STEPS)],
                             capture_output=True, text=True, timeout=300)
    assert horovod.returncode == 0, horovod.stderr[-2000:]
    return {"ddp-accumulate": _printed(ddp.stdout), "horovod-passes": _printed(horovod.stdout)}


def _losses(db: Path, experiment: str) -> dict[tuple[str, str, str | None], list[float]]:
    """(job, mode, policy) -> the losses the shim recorded in an experiment, one per optimizer step."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select r.name, r.mode, r.policy, m.loss from iteration_metrics m "
                                  "join runs r on r.id = m.run_id where r.experiment_id = ? order by r.id, m.step",
                                  (experiment,)).fetchall()
    found: dict[tuple[str, str, str | None], list[float]] = {}
    for name, mode, policy, loss in rows:
        found.setdefault((name, mode, policy), []).append(loss)
    return found


def test_scripts_are_profiled_planned_with_a_recipe_and_run_from_the_plan_with_their_losses(isolated_results):
    work = isolated_results / "jobs"
    shutil.copytree(SCRIPTS, work)
    (work / "ddp-accumulate.toml").write_text(textwrap.dedent(f"""
        name = "ddp-accumulate"
        script = "ddp_accumulate.py"
        args = ["--steps", "{DDP_STEPS}", "--checkpoint-dir", "{work / 'checkpoints'}", "--overflow-at", "{DDP_OVERFLOW}"]
        np = 2
        iterations = {DDP_CAP}   # stopped before its own end, on both ranks (not at rank 0's evaluation after it)
    """))
    alone = _alone(work)
    assert len(alone["ddp-accumulate"][1]) == DDP_STEPS and len(alone["horovod-passes"][1]) == HOROVOD_STEPS

    jobs = [str(work / "ddp-accumulate.toml"), str(work / "horovod-passes.toml")]
    # (the interference next to the reference partner is measured for scripts as for recipes; left out here:
    # it doubles the time, and makes the grouping below depend on how loaded this machine is)
    profiled = xover("profile", *jobs, "mlp-digits", "--iterations", "10", "--warmup", "2", "--no-corun", "--json")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    profiles = {p["name"]: p for p in json.loads(profiled.stdout)}
    for name in ("ddp-accumulate", "horovod-passes"):
        profile = profiles[name]
        parameter_bytes = alone[name][0]
        # what the engine all-reduced per optimizer step: every parameter once (not once per backward)
        assert abs(profile["gradient_mb"] * 2**20 - parameter_bytes) <= 0.01 * parameter_bytes, (name, profile)
        assert profile["compute_ms"] > 0 and profile["comm_ms"] >= 0 and profile["memory_gb"] > 0
        assert profile["startup_ms"] > 0
        assert profile["checkpoints"] > 0  # the yield points its steps passed: the planner's yield latency
        assert profile["iterations_measured"] == 8  # optimizer steps after the warm-up, not backward passes

    plan_file = isolated_results / "plan.json"
    planned = xover("plan", *jobs, "mlp-digits", "--devices", "2", "--max-group", "3", "--out", str(plan_file),
                    "--json")
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(plan_file.read_text())
    groups = [sorted(g["jobs"]) for g in plan["groups"]]  # grouped or not, as this machine's profiles say
    assert sorted(sum(groups, [])) == ["ddp-accumulate", "horovod-passes", "mlp-digits"], groups
    ddp_entry = plan["jobs"]["ddp-accumulate"]["script"]
    assert ddp_entry["engine"] == "torch" and ddp_entry["iterations"] == DDP_CAP
    assert plan["jobs"]["horovod-passes"]["script"]["engine"] == "horovod"

    # crossover only: the reference is each script alone without xover (a sequential run under xover
    # would add three launches and no path: its losses equal these when crossover's do)
    ran = xover("run", str(plan_file), "--mode", "crossover", "--iterations", str(DDP_CAP),
                "--json")  # every job 10 steps
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    assert {(j["name"], j["mode"]) for j in result["jobs"]} == {
        (n, "crossover") for n in ("ddp-accumulate", "horovod-passes", "mlp-digits")}
    assert all(j["status"] == "finished" for j in result["jobs"])
    recorded = _losses(isolated_results / "xover.db", result["experiment"])
    policies = {j["name"]: j["policy"] for j in result["jobs"]}  # None for a job the plan left alone
    for name in ("ddp-accumulate", "horovod-passes"):
        assert recorded[(name, "crossover", policies[name])] == alone[name][1][:DDP_CAP], name
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == ["step10.pt", "step5.pt"]  # by rank 0

    # the two scripts taking turns on the same devices, whatever the plan made of them here: in the
    # plan's run where it grouped them, else as job files in an ad-hoc group with a built-in recipe
    if not any({"ddp-accumulate", "horovod-passes"} <= set(group) for group in groups):
        together = xover("run", "--group", *jobs, "mlp-digits", "--iterations", str(DDP_CAP), "--mode", "crossover",
                         "--json")
        assert together.returncode == 0, together.stderr[-3000:]
        result = json.loads(together.stdout)
        recorded = _losses(isolated_results / "xover.db", result["experiment"])
        assert recorded[("ddp-accumulate", "crossover", "work-conserving")] == alone["ddp-accumulate"][1][:DDP_CAP]
        assert recorded[("horovod-passes", "crossover", "work-conserving")] == alone["horovod-passes"][1][:DDP_CAP]
    crossover = {j["name"]: j for j in result["jobs"]}
    assert crossover["ddp-accumulate"]["iterations"] == DDP_CAP
    assert crossover["ddp-accumulate"]["turn_stats"]["grants"] >= 2 * DDP_CAP  # two backward passes a step
    assert crossover["horovod-passes"]["turn_stats"]["grants"] >= 2 * DDP_CAP

    # a script changed since it was profiled is refused, unless --allow-changed (then recorded as such)
    script = work / "horovod_passes.py"
    script.write_text(script.read_text().replace("lr=1e-3", "lr=2e-3"))
    refused = xover("run", str(plan_file), "--mode", "crossover")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "horovod_passes.py changed since it was profiled" in refused.stderr
    assert "--allow-changed" in refused.stderr
    groups, _ = groups_from_plan(str(plan_file), None, None, allow_changed=True)
    [changed] = [job for group in groups for job in group.jobs if job.name == "horovod-passes"]
    profiled_with = plan["jobs"]["horovod-passes"]["script"]["sha256"]
    assert changed.recipe.model_options == {"profiled_sha256": profiled_with}  # in the run's recorded recipe
    assert changed.recipe.script_sha256 != profiled_with and changed.recipe.to_dict()["model_options"]


UNFOLLOWABLE = {
    "no optimizer step": ("torch", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        for _ in range(8):
            model(torch.randn(3, 4)).sum().backward()
    """, "no optimizer.step()"),
    "hand-written all-reduce": ("horovod", """
        import horovod.torch as hvd, torch
        hvd.init()
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            model(torch.randn(3, 4)).sum().backward()
            for p in model.parameters():
                hvd.allreduce_(p.grad)
            optimizer.step()
    """, "optimizer that hvd.DistributedOptimizer does not drive"),
    "second process group": ("torch", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        group = dist.new_group([0])
        model = DistributedDataParallel(torch.nn.Linear(4, 2), process_group=group)
    """, "second process group"),
    "Adasum": ("horovod", """
        import horovod.torch as hvd, torch
        hvd.init()
        model = torch.nn.Linear(4, 2)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    """, "op=hvd.Adasum) all-reduces the update inside the optimizer's step"),  # before: xover's own traceback
    # behind an `if`, which reading the script leaves to the shim; before, on a CPU, Horovod's own ValueError in
    # forward (GPU tensors only), and on a GPU its collectives blocked in forward while the job held its turn
    "hvd.SyncBatchNorm behind a flag": ("horovod", """
        import sys
        import horovod.torch as hvd, torch
        hvd.init()
        norm = hvd.SyncBatchNorm if sys.argv else torch.nn.BatchNorm1d
        model = torch.nn.Sequential(torch.nn.Linear(4, 2), norm(2))
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(8):
            optimizer.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            optimizer.step()
    """, "uses hvd.SyncBatchNorm, whose all-gathers (in forward)"),
    "the other engine": ("horovod", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo")
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
    """, "runs under engine horovod"),
}


@pytest.mark.parametrize("case", UNFOLLOWABLE)
def test_what_a_shim_cannot_follow_is_one_clear_error_at_profile_time(isolated_results, case):
    engine, source, expected = UNFOLLOWABLE[case]
    script = isolated_results / "train.py"
    script.write_text(textwrap.dedent(source))
    job = isolated_results / "job.toml"
    job.write_text(f'script = "train.py"\nnp = 1\nengine = "{engine}"\n')
    result = xover("profile", str(job), "--iterations", "6", "--warmup", "1", "--no-corun", timeout=300)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {job}: ") and expected in line, line
    assert result.stderr.strip().endswith(line)  # the last word, and one line


def test_the_gpu_checks_scripts_phase_profiles_plans_and_runs_a_job_file(tmp_path):
    """scripts/gpu_check.sh's `scripts` phase (a user's DDP script next to a recipe, on the GPU machine),
    through the script with a stand-in for `python -m xover` that records each call (the calls themselves
    are what the test above runs for real)."""
    import os

    from conftest import gpu_check_stand_in

    root = Path(__file__).resolve().parents[2]
    stand_in, calls = gpu_check_stand_in(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("XOVER_DB", "XOVER_RESULTS")}
    result = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu", "--phases", "scripts", "--out", str(tmp_path / "out")],
                            cwd=root, env={**env, "PYTHON": str(stand_in)}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    made = [line.split() for line in calls.read_text().splitlines()]
    assert [call[0] for call in made] == ["profile", "plan", "run", "report"], made
    job = "tests/e2e/scripts/ddp-accumulate.toml"  # on the GPU machine: bench/gpu/recipes/gpu-ddp-script.toml
    assert made[0][1:3] == [job, "mlp-synthetic"] and made[1][1:3] == [job, "mlp-synthetic"]
    assert made[2][1].endswith("scripts-plan.json") and "--mode" in made[2]
    assert load_recipe(root / "bench" / "gpu" / "recipes" / "gpu-ddp-script.toml").engine == "torch"
