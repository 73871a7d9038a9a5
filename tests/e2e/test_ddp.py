"""Unmodified DistributedDataParallel scripts under torchrun in crossover groups (real torchrun, Gloo,
np=2): every loss the script prints is the one it prints under plain torchrun, whatever the mode or
turn policy, next to a copy of itself, another script or a recipe (refusals: tests/unit/test_ddp_refusals.py,
tests/integration/test_ddp_refusals_cli.py)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import plain_torchrun

from xover.records import parse_metric_line

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "recipes/examples/ddp_digits.py"
STEPS = 30
LOSS_LINE = re.compile(r"^(?:step \d+|final|averaged|best|probe) loss \S+$", re.MULTILINE)


def _printed_losses(text: str) -> list[str]:
    return LOSS_LINE.findall(text)


def _rank0_stdout(log_dir: str) -> str:
    """What rank 0 of a job printed, from the rank logs torchrun kept for xover."""
    [stdout] = Path(log_dir).glob("ranks/**/attempt_*/0/stdout.log")
    return stdout.read_text()


def _rank0_losses(log_dir: str) -> list[str]:
    return _printed_losses(_rank0_stdout(log_dir))


def _plain_torchrun(*script_args: str) -> list[str]:
    """The script alone under torchrun, nothing of xover involved."""
    result = plain_torchrun(SCRIPT, *script_args)
    losses = _printed_losses(result.stdout)
    # one per step, the final loss (and the averaged model's, the best kept)
    assert len(losses) == STEPS + 1 + ("--swa" in script_args) + ("--keep-best" in script_args) + (
        "--probe" in script_args)
    return losses


def _xover_run(*args: str, env: dict | None = None) -> dict:
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--engine", "torch", *args],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _group(folder: Path, jobs: dict[str, tuple[Path | str, list[str]]], *args: str) -> dict[tuple, dict]:
    """One group of the scripts `jobs` (name: script and its arguments), each a job file of its own, run in a store
    of `folder`'s (for a fixture that several tests read): (name, mode, policy) -> the job's run. Scripts of
    several tests in one group, each the others' partner: a launch of xover and a job less for each test than a
    group of two copies of its script each (every launch costs seconds of process starts and imports)."""
    files = []
    for name, (script, script_args) in jobs.items():
        quoted = ", ".join(f'"{arg}"' for arg in script_args)
        (folder / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{ROOT / script}"\nargs = [{quoted}]\nnp = 2\n')
        files.append(str(folder / f"{name}.toml"))
    env = {**os.environ, "XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    report = _xover_run("--group", *files, *args, "--json", env=env)
    return {(job["name"], job["mode"], job["policy"]): job for job in report["jobs"]}


def _runs_of(runs: dict[tuple, dict], name: str) -> dict[tuple, dict]:
    return {key: job for key, job in runs.items() if key[0] == name}


# two copies of the script, each with options of its own, in one group: what the first two tests below read (each
# was a group of two copies of one variant). Every mode, both policies: the first variant in every mode, the
# frozen/unused one under both policies (each test asserts on every run of its own variant).
DIGITS_VARIANTS = {
    "ddp_digits": ["--steps", str(STEPS), "--log-every", "1", "--clip-by-hand", "0.5", "--center", "--probe"],
    "ddp_digits-frozen": ["--steps", str(STEPS), "--log-every", "1", "--frozen", "--batchnorm", "--accumulate", "2",
                          "--average-loss", "--swa", "--keep-best"],
}


@pytest.fixture(scope="module")
def two_ddp_digits_variants(tmp_path_factory):
    alone = {name: _plain_torchrun(*args) for name, args in DIGITS_VARIANTS.items()}
    runs = _group(tmp_path_factory.mktemp("ddp-digits-variants"),
                  {name: (SCRIPT, args) for name, args in DIGITS_VARIANTS.items()},
                  "--mode", "sequential,concurrent,crossover", "--policy", "all")
    return alone, runs


def _assert_the_variant_keeps_the_losses(two_ddp_digits_variants, name: str) -> dict:
    """The variant `name` in every mode and under both policies, next to the other: every loss rank 0 prints is
    plain torchrun's."""
    alone, runs = two_ddp_digits_variants
    assert set(runs) == {(variant, mode, policy) for variant in DIGITS_VARIANTS
                         for mode, policy in (("sequential", None), ("concurrent", None),
                                              ("crossover", "work-conserving"), ("crossover", "round-robin"))}
    own = _runs_of(runs, name)
    for (_, mode, policy), job in own.items():
        assert job["status"] == "finished", job["error"]
        assert job["samples_per_s"] > 0
        assert _rank0_losses(job["log_dir"]) == alone[name], (name, mode, policy)
        if mode == "crossover":
            assert job["turn_stats"]["grants"] >= 2 * STEPS  # a turn per compute phase, on both devices
    return own


def test_two_copies_of_a_ddp_script_keep_plain_torchrun_losses(two_ddp_digits_variants):
    """Every mode, both policies (next to the frozen/unused variant of the test below); the script clips its
    gradients by hand from each .grad between backward and the step (before, it read them still being reduced:
    the ranks drifted apart in every mode), and centres its inputs on a buffer it updates through .data (before,
    its version counter never moved, DDP's broadcast of rank 0's was skipped, and the losses differed); and a
    linear probe beside the model, fitted by an optimizer of its own after each step: neither its steps nor its
    backwards are the job's iterations (before, each was one, and its loss was added to the next step's)."""
    runs = _assert_the_variant_keeps_the_losses(two_ddp_digits_variants, "ddp_digits")
    for job in runs.values():
        assert job["iterations"] == STEPS  # one per backward, counted by the shim
        # the model's loss, as its last backward saw it (printed as plain torchrun's): none of the probe's in it
        [final] = [line for line in _rank0_losses(job["log_dir"]) if line.startswith("final")]
        assert job["final_loss"] == float(final.split()[-1]), (job["final_loss"], final)
        assert job["communication_ms"] > 0  # the wait for the all-reduces, before the step
        assert job["comm_threads"] == ("batch" if job["mode"] == "crossover" else "normal")


def test_frozen_unused_batchnorm_and_no_sync_keep_plain_torchrun_losses(two_ddp_digits_variants):
    """find_unused_parameters (a frozen layer, a head never used), BatchNorm buffers that DDP broadcasts
    in forward, two micro-batches per step with the first inside no_sync(), a dist.all_reduce of the
    logged loss in the loop (a collective the shim runs outside the turn), and stochastic weight averaging:
    AveragedModel deep-copies the DDP model (before, "cannot pickle 'AccumulateGrad' object" in every
    mode), and its BatchNorm statistics are recomputed by forwards of the copy, whose buffer broadcasts
    and the model's come in one order on both ranks (before, a Gloo size mismatch aborted a rank); and a
    copy rank 0 alone keeps of the best model, never forwarded, broadcasts nothing there alone (when the
    copies were first adopted, rank 0 broadcast its buffers by itself: the run hung)."""
    # under turns, where the shim steps in, under both policies, and in every mode (plain torchrun is the reference),
    # next to the variant of the test above
    runs = _assert_the_variant_keeps_the_losses(two_ddp_digits_variants, "ddp_digits-frozen")
    for job in runs.values():
        assert job["iterations"] == STEPS  # an iteration is an optimizer step: both micro-batches count in it


def test_a_ddp_script_next_to_a_recipe(isolated_results):
    # recipes and scripts in one group: the recipes after --group, the scripts' own arguments after --, and
    # --iterations capping both (the script's 30 steps cut at 20: it ran its own 30 before); one policy: the
    # frozen/unused copies above take turns under both
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "--script", SCRIPT,
                             "--engine", "torch", "--mode", "sequential,crossover", "--iterations", "20",
                             "--json",
                             "--", "--steps", str(STEPS), "--log-every", "1"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {(j["name"], j["mode"], j["policy"]): j for j in json.loads(result.stdout)["jobs"]}
    assert all(job["status"] == "finished" for job in jobs.values())
    alone = _rank0_losses(jobs[("ddp_digits", "sequential", None)]["log_dir"])
    assert len(alone) == 20  # stopped after 20 steps, before its final line
    assert {job["iterations"] for job in jobs.values()} == {20}
    script, recipe = jobs[("ddp_digits", "crossover", "work-conserving")], jobs[("mlp-digits", "crossover", "work-conserving")]
    assert _rank0_losses(script["log_dir"]) == alone
    assert recipe["final_loss"] == jobs[("mlp-digits", "sequential", None)]["final_loss"]
    assert script["turn_stats"]["grants"] >= 2 * 20 and recipe["turn_stats"]["grants"] >= 2 * 20


def test_a_sharded_optimizer_counts_one_iteration_per_step_and_broadcasts_outside_the_turn(isolated_results):
    """ZeroRedundancyOptimizer steps its local AdamW inside its own step, then broadcasts the shards. Before:
    two iterations per step (the second without a loss: the job's loss was None), and the broadcasts
    waited for in the turn, so a rank held its device while its peer waited for a turn the other job held,
    until the lease broke it (30 s a run, crossover 0.02x of the jobs alone)."""
    script, steps = "tests/e2e/scripts/ddp_zero.py", 20
    result = plain_torchrun(script, "--steps", str(steps))
    alone = _printed_losses(result.stdout)
    assert len(alone) == steps + 1
    # crossover only: the reference is the script alone under plain torchrun (a sequential run under xover adds
    # two launches and no path: the iteration count and the loss are the shim's in any mode)
    report = _xover_run("--script", script, "--script", script, "--mode", "crossover", "--policy",
                        "work-conserving", "--json", "--", "--steps", str(steps))
    assert sorted(job["mode"] for job in report["jobs"]) == ["crossover", "crossover"]
    for job in report["jobs"]:
        assert job["status"] == "finished", job["error"]
        assert job["iterations"] == steps and job["final_loss"] is not None, job
        assert _rank0_losses(job["log_dir"]) == alone, (job["name"], job["mode"])
        assert job["turn_stats"]["revoked"] == 0, job["turn_stats"]  # no turn held through a broadcast
        assert job["turn_stats"]["grants"] >= 2 * steps


LOGGED, LOGGED_STEPS = "tests/e2e/scripts/ddp_logged_metrics.py", 12
DIVERGES, DIVERGES_STEPS = "tests/e2e/scripts/ddp_diverges.py", 8


@pytest.fixture(scope="module")
def logged_and_diverged(tmp_path_factory):
    """The scripts of the two tests below in one group (work-conserving), each the other's partner, alone and taking
    turns (each test was a group of two copies of its script): the reference of the first (its script alone under
    plain torchrun, and what each rank logged), what `xover run` printed (the second reads its table), and the run's
    report (`xover report --format json`, what the second reads; the first reads its runs)."""
    folder = tmp_path_factory.mktemp("logged-and-diverged")
    plain = folder / "plain"
    plain.mkdir()
    # its rendezvous as torchrun's own (a try again after Gloo's abort at exit would meet a stale file)
    alone = plain_torchrun(LOGGED, "--steps", str(LOGGED_STEPS), "--late-ms", "60", "--log-file", f"{plain}/losses")
    logged = {rank: (plain / f"losses.rank{rank}").read_text() for rank in (0, 1)}
    jobs = {"logged-metrics": (LOGGED, ["--steps", str(LOGGED_STEPS), "--late-ms", "60", "--log-file",
                                        "{job_dir}/losses", "--rendezvous-file", "{job_dir}/rendezvous"]),
            "diverges": (DIVERGES, ["--steps", str(DIVERGES_STEPS), "--diverge-at", "3"])}
    for name, (script, args) in jobs.items():
        quoted = ", ".join(f'"{arg}"' for arg in args)
        (folder / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{ROOT / script}"\nargs = [{quoted}]\nnp = 2\n')
    env = {**os.environ, "XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    # the table, not --json: the second test reads what the run printed
    ran = subprocess.run([sys.executable, "-m", "xover", "run", "--engine", "torch", "--group",
                          *(str(folder / f"{name}.toml") for name in jobs), "--mode", "sequential,crossover",
                          "--policy", "work-conserving"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env={**env, "COLUMNS": "250"})
    shown = subprocess.run([sys.executable, "-m", "xover", "report", "--format", "json"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    return {"alone": alone.stdout, "logged": logged, "ran": ran, "shown": shown}


def test_a_scripts_own_collectives_after_the_step_count_as_communication_not_compute(logged_and_diverged):
    """A script that gathers its ranks' losses after each step (all_gather_object, broadcast_object_list, a
    reduce and a barrier now and then) holds the turn there, for the update: its collectives step out of it,
    and their time was counted as the job's compute. With rank 1 late by 60 ms a step, rank 0 waits that long
    in the gather: a profile read 60 ms of compute and next to none of communication, and a plan saw a
    compute-heavy job where the device idles. Now that wait is the iteration's communication, alone and in
    crossover, and the losses are plain torchrun's. Every other step the wait is an asynchronous all-reduce's,
    each time waited for another way (`work.wait()`, `work.get_future().wait()`, a Future chained with `.then()`,
    `torch.futures.wait_all`, `torch.futures.collect_all(...).wait()`), which waited in the turn (a probe,
    2026-12-06: two such jobs held each other's devices until the turns were taken back, 30 s; the Future's
    wait, and the chained and collected ones' after it, until 2026-12-07). The script also writes a log it never
    closes and meets through a `file://` rendezvous that it never destroys: under xover, whose ranks exit without
    Python's teardown, the log was empty and the rendezvous file stayed, the next run's stale rendezvous (the same
    probe); and so it stayed now and then after that, where something of the script in a reference cycle held the
    process group (the whole suite's fresh clones, 2026-12-07): its model is held in one, which Python's exit
    collects, and so does the rank's end now."""
    steps = LOGGED_STEPS
    loss_line = re.compile(r"^step \d+ loss \S+ mean \S+$", re.MULTILINE)
    alone = loss_line.findall(logged_and_diverged["alone"])
    assert len(alone) == steps
    logged = logged_and_diverged["logged"]
    assert logged[0].count("\n") == steps
    ran, shown = logged_and_diverged["ran"], logged_and_diverged["shown"]
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert shown.returncode == 0, shown.stderr[-3000:]
    own = [job for job in json.loads(shown.stdout)["jobs"] if job["name"] == "logged-metrics"]
    assert sorted(job["mode"] for job in own) == ["crossover", "sequential"]
    for job in own:
        assert job["status"] == "finished" and job["iterations"] == steps, job
        assert loss_line.findall(_rank0_stdout(job["log_dir"])) == alone, (job["name"], job["mode"])
        # the 60 ms wait, less a rank's skew: communication; the update and a small model's passes: compute
        assert job["communication_ms"] > 40, job
        assert job["compute_ms"] < 20, job  # 30 more with the asynchronous wait in the turn
        # nor any iteration's, the median's or not: the script's steps 2, 4, 6 and 8 wait on the all-reduce's Future
        # (its own, one chained with `.then()`, `wait_all`'s, `collect_all`'s), each of which held the turn through
        # the 60 ms before (the wait after step s is in record s + 1: 3, 5, 7, 9); steps 0 and 10 on the Work
        records = [parse_metric_line(line) for line in _rank0_stdout(job["log_dir"]).splitlines()]
        computes = {record["step"]: record["compute_s"] for record in records if record and record["kind"] == "iter"}
        assert len(computes) == steps
        assert {step: s for step, s in computes.items() if step and s >= 0.04} == {}, job["mode"]
        out = Path(job["log_dir"]) / "out"
        assert {rank: (out / f"losses.rank{rank}").read_text() for rank in (0, 1)} == logged, job["name"]
        assert not (out / "rendezvous").exists()


def test_a_diverged_job_says_so_alone_and_shared_and_its_nan_losses_are_compared(logged_and_diverged):
    """Rank 0's infinite input at step 3 makes every loss from then on NaN. SQLite kept a NaN loss as NULL, "not
    known": the job read as healthy (final loss step 2's) and loss parity compared 3 of its 8 iterations. Now its
    final loss is NaN (null in the JSON, which has no NaN), where it diverged is said once, and parity counts all 8,
    NaN against NaN the same."""
    steps = DIVERGES_STEPS
    ran, shown = logged_and_diverged["ran"], logged_and_diverged["shown"]
    assert ran.returncode == 0, ran.stderr[-3000:]  # it did finish, as under plain torchrun
    # a line a job, not a run: once for the job, whose two runs (alone, in turns) both diverged
    assert ran.stdout.count("loss not finite from step 3 (nan, 5 of 8 iterations)") == 1, ran.stdout
    assert "diverges: loss not finite from step 3 (nan, 5 of 8 iterations) in " in ran.stdout, ran.stdout
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "NaN" not in shown.stdout and "Infinity" not in shown.stdout  # strict JSON: jq reads it
    report = json.loads(shown.stdout)
    own = [job for job in report["jobs"] if job["name"] == "diverges"]
    assert sorted(job["mode"] for job in own) == ["crossover", "sequential"]
    for job in own:
        assert job["status"] == "finished" and job["iterations"] == steps, job
        assert job["final_loss"] is None, job  # not finite: loss_not_finite says what it was
        assert job["loss_not_finite"] == {"step": 3, "loss": "nan", "iterations": 5}, job
    parity = [p for p in report["parity"] if p["name"] == "diverges"]
    assert [(p["steps"], p["max_abs_loss_diff"], p["identical"]) for p in parity] == [(steps, 0.0, True)]


LATE_STEPS = 12
LATE_RANK_SCRIPTS = {  # name: the script, the lines of its losses
    "functional-collectives": ("tests/e2e/scripts/ddp_functional_collectives.py", r"^step \d+ loss \S+ mean \S+$"),
    "loss-kept-on-the-module": ("tests/e2e/scripts/ddp_loss_kept_on_the_module.py", r"^step \d+ loss \S+$"),
}


@pytest.fixture(scope="module")
def late_rank_scripts(tmp_path_factory):
    """The two scripts of the two tests below, rank 1 late by 60 ms a step (--late-ms), each alone under plain torchrun
    and in one crossover group (work-conserving), each the other's partner (each test was a group of two copies of its
    script): what each printed alone, and the runs."""
    args = ["--steps", str(LATE_STEPS), "--late-ms", "60"]
    alone = {name: plain_torchrun(script, *args).stdout for name, (script, _) in LATE_RANK_SCRIPTS.items()}
    runs = _group(tmp_path_factory.mktemp("late-rank-scripts"),
                  {name: (script, args) for name, (script, _) in LATE_RANK_SCRIPTS.items()},
                  "--mode", "crossover", "--policy", "work-conserving")
    return alone, runs


def _late_rank_in_crossover(late_rank_scripts, name: str) -> dict:
    """The job `name` of late_rank_scripts: finished with the losses of the script alone, and no iteration but the
    first counts rank 0's wait for rank 1 as compute (the wait after step s is in record s + 1). The job, for the
    caller's own checks."""
    printed, runs = late_rank_scripts
    assert len(runs) == len(LATE_RANK_SCRIPTS)
    loss_line = re.compile(LATE_RANK_SCRIPTS[name][1], re.MULTILINE)
    alone = loss_line.findall(printed[name])
    assert len(alone) == LATE_STEPS
    [job] = _runs_of(runs, name).values()
    assert job["mode"] == "crossover"
    assert job["status"] == "finished" and job["iterations"] == LATE_STEPS, job
    assert loss_line.findall(_rank0_stdout(job["log_dir"])) == alone, job["name"]
    records = [parse_metric_line(line) for line in _rank0_stdout(job["log_dir"]).splitlines()]
    computes = {record["step"]: record["compute_s"] for record in records if record and record["kind"] == "iter"}
    assert len(computes) == LATE_STEPS
    assert {step: s for step, s in computes.items() if step and s >= 0.04} == {}, job["name"]
    return job


def test_functional_collectives_are_waited_for_out_of_the_turn_as_communication(late_rank_scripts):
    """A script that communicates through torch's functional collectives (torch.distributed._functional_collectives,
    where torch's deprecation of torch.distributed.nn's points): a gather of features inside forward (its
    AsyncCollectiveTensor waited for at first use, its backward's reduce-scatter in backward), and after each step an
    all-reduce of the loss, waited for at its first use, by `.wait()`, `wait_tensor()` and `.tolist()` in turn. Their
    waits were made in the turn (a probe, 2026-12-07: two such jobs in crossover, work-conserving, held each other's
    devices until the lease took the turns back, 30 s, in 2 runs of 9; and with rank 1 late by 60 ms a step, the
    wait read as 62 ms of compute and 2 of communication). Now each waits out of the turn, as communication, and
    the losses are plain torchrun's."""
    job = _late_rank_in_crossover(late_rank_scripts, "functional-collectives")
    # the 60 ms wait, less a rank's skew: communication; the update and a small model's passes: compute
    assert job["communication_ms"] > 40, job
    assert job["compute_ms"] < 20, job


def test_a_backward_that_misses_ddps_output_waits_for_the_used_parameter_map_out_of_the_turn(late_rank_scripts):
    """find_unused_parameters, and a loss that does not come through DDP's output (the model keeps it; the script
    prepares the reducer with it, as Lightning does in manual optimization): DDP waits for its all-reduce of the
    used-parameter map at the end of each backward. That wait was made in the turn, where only a backward through
    DDP's output released it first (a probe, 2026-12-07: two copies of Lightning's GAN in crossover held each
    other's devices until the lease took the turns back, 30 s, in 4 runs of 5; with rank 1 late by 60 ms a step, the
    wait read as compute). Now the turn is released before it, and the losses are plain torchrun's."""
    job = _late_rank_in_crossover(late_rank_scripts, "loss-kept-on-the-module")
    assert not job["turn_stats"].get("taken_back") and not job["turn_stats"].get("revoked"), job["turn_stats"]


def test_a_compiled_model_takes_turns_with_the_losses_of_the_script_alone(isolated_results, tmp_path):
    """torch.compile traces the forward pre-hook xover sets on every module; before, the trace failed at the
    hook's first forward ('... is already tracked for mutation'), in every mode. Now the compiled module's own
    call (outside the trace) takes the turn and sees the batch; a model compiled in place (`model.compile()`,
    whose hooks run only inside the trace) too: its batch went unseen before (samples/s 0)."""
    script, steps = ROOT / "tests/e2e/scripts/ddp_compiled.py", 10
    variants = {"compiled": [], "compiled-in-place": ["--in-place"]}
    alone = {}
    for name, extra in variants.items():
        alone[name] = _printed_losses(plain_torchrun(script, "--steps", str(steps), *extra).stdout)
        assert len(alone[name]) == steps
        args = ", ".join(f'"{arg}"' for arg in ["--steps", str(steps), *extra])
        (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{script}"\nargs = [{args}]\nnp = 2\n')
    report = _xover_run("--group", str(tmp_path / "compiled.toml"), str(tmp_path / "compiled-in-place.toml"),
                        "--mode", "crossover", "--policy", "work-conserving", "--json")
    assert {job["name"] for job in report["jobs"]} == set(variants)
    for job in report["jobs"]:
        assert job["status"] == "finished", job["error"]
        assert job["iterations"] == steps and job["samples_per_s"] > 0, job
        assert _rank0_losses(job["log_dir"]) == alone[job["name"]], job["name"]
        assert job["turn_stats"]["grants"] >= 2 * steps and job["turn_stats"]["revoked"] == 0, job["turn_stats"]


def test_optimizer_steps_that_are_not_one_per_backward_count_one_iteration_and_keep_the_losses(isolated_results,
                                                                                            tmp_path):
    """Two optimizers stepping on one backward (AdamW for the matrices, SGD for the rest) and LBFGS, whose
    closure (given by position) runs forward and backward several times inside one step. Before: the split
    counted two iterations a step (half of them without a loss, twice the samples) and, stopped at the job
    file's iterations, lost its last step's second update; LBFGS's closure was not seen, the optimizer read
    gradients whose all-reduces had not ended, and the ranks' weights drifted apart (losses in no mode as
    alone)."""
    script, steps, cap = ROOT / "tests/e2e/scripts/ddp_optimizers.py", 12, 8
    alone, jobs = {}, []
    for optimizer, iterations in (("split", cap), ("lbfgs", None)):
        alone[optimizer] = _printed_losses(plain_torchrun(script, "--steps", str(steps), "--optimizer", optimizer).stdout)
        assert len(alone[optimizer]) == steps
        path = tmp_path / f"{optimizer}.toml"
        path.write_text(f'name = "{optimizer}"\nscript = "{script}"\nnp = 2\n'
                        f'args = ["--steps", "{steps}", "--optimizer", "{optimizer}"]\n'
                        + (f"iterations = {iterations}\n" if iterations else ""))
        jobs.append(str(path))
    report = _xover_run("--group", *jobs, "--mode", "crossover", "--policy", "work-conserving", "--json")
    for job in report["jobs"]:
        assert job["status"] == "finished", job["error"]
        made = cap if job["name"] == "split" else steps
        assert job["iterations"] == made and job["final_loss"] is not None, job
        # every step's loss as alone; the split stopped at its cap after the step's second update and print
        assert _rank0_losses(job["log_dir"]) == alone[job["name"]][:made], job["name"]
        # the loss recorded is the step's as the script has it: LBFGS's first evaluation, not the sum of its four
        assert job["final_loss"] == pytest.approx(float(alone[job["name"]][made - 1].split()[-1]), rel=1e-6), job


CHECKPOINTED, CHECKPOINTED_STEPS = "tests/e2e/scripts/ddp_checkpointed.py", 12
SCALED, SCALED_STEPS = "tests/e2e/scripts/ddp_scaled.py", 16


@pytest.fixture(scope="module")
def checkpointed_and_scaled(tmp_path_factory):
    """The scripts of the two tests below, each alone under plain torchrun, and in one group (work-conserving), each
    the other's partner, taking turns and as an adaptive group (each test was a group of two copies of its script):
    what each printed alone, and the runs."""
    alone = {"checkpointed": plain_torchrun(CHECKPOINTED, "--steps", str(CHECKPOINTED_STEPS)).stdout,
             "scaled": plain_torchrun(SCALED, "--steps", str(SCALED_STEPS)).stdout}
    runs = _group(tmp_path_factory.mktemp("checkpointed-and-scaled"),
                  {"checkpointed": (CHECKPOINTED, ["--steps", str(CHECKPOINTED_STEPS)]),
                   "scaled": (SCALED, ["--steps", str(SCALED_STEPS)])},
                  "--mode", "crossover,adaptive", "--policy", "work-conserving")
    return alone, runs


def test_reentrant_checkpointing_and_two_losses_in_one_backward_count_one_backward_a_step(checkpointed_and_scaled):
    """Reentrant activation checkpointing backs through each block from inside the script's backward: each inner
    backward released the turn in the middle of the outer one and counted a backward and its batch (samples 4x, 3x
    the grants). `torch.autograd.backward([a, b])` recorded no loss, and parity compared nothing; so did a backward of
    per-sample losses given their weights as its gradient (the second of the two here)."""
    steps = CHECKPOINTED_STEPS
    printed_alone, runs = checkpointed_and_scaled
    alone = printed_alone["checkpointed"].splitlines()
    assert len(alone) == steps + 1
    own = _runs_of(runs, "checkpointed")
    assert sorted(job["mode"] for job in own.values()) == ["adaptive", "crossover"]
    for job in own.values():
        assert job["status"] == "finished", job["error"]
        [stdout] = Path(job["log_dir"]).glob("ranks/**/attempt_*/0/stdout.log")
        printed = [line for line in stdout.read_text().splitlines() if not line.startswith("XOVER-METRIC")]
        assert printed == alone, (job["name"], job["mode"])
        assert job["iterations"] == steps
        # 16 samples a rank, two ranks: one batch a step, however many backwards the checkpoints ran (read from each
        # iteration's record: samples/s times the median iteration is a ratio of timings, 28 on a busy CI machine)
        records = [parse_metric_line(line) for line in stdout.read_text().splitlines()]
        assert [record["samples"] for record in records if record and record["kind"] == "iter"] == [32] * steps, job
        # a turn per compute phase on both devices, not one per inner backward (an adaptive group takes turns only
        # part of its time: fewer)
        assert job["turn_stats"]["grants"] < 3 * steps, job["turn_stats"]
        if job["mode"] == "crossover":
            assert 2 * steps <= job["turn_stats"]["grants"], job["turn_stats"]
        # the loss recorded is the two losses' sum, as the script printed it
        assert job["final_loss"] == pytest.approx(float(alone[-2].split()[-1]), rel=1e-6), job


def test_a_grad_scaler_that_skips_steps_and_a_static_graph_of_small_buckets_keep_the_losses(checkpointed_and_scaled):
    """fp16 autocast with a GradScaler that skips half the steps here (scaler.step never calls optimizer.step on
    those), DDP with static_graph and buckets small enough for several all-reduces a backward, gradients as
    bucket views, @record and all_gather_object: every step counts one iteration, skipped or not, and every
    loss is plain torchrun's, in turns and in an adaptive group (checked by hand on 2026-12-04, kept here)."""
    steps = SCALED_STEPS
    printed_alone, runs = checkpointed_and_scaled
    alone = printed_alone["scaled"]
    skipped = re.search(r"^skipped \[(\d+), \1\]$", alone, re.MULTILINE)  # 8 of 16 here
    assert skipped and 0 < int(skipped.group(1)) < steps, alone  # the case itself: steps overflowed
    own = _runs_of(runs, "scaled")
    assert sorted(job["mode"] for job in own.values()) == ["adaptive", "crossover"]
    for job in own.values():
        assert job["status"] == "finished", job["error"]
        assert job["iterations"] == steps and job["samples_per_s"] > 0, job
        printed = _rank0_stdout(job["log_dir"])
        assert _printed_losses(printed) == _printed_losses(alone), (job["name"], job["mode"])
        assert skipped.group(0) in printed.splitlines(), (job["name"], job["mode"])


def test_gradients_kept_by_reference_are_those_of_plain_ddp(isolated_results, tmp_path):
    """xover makes every .grad a view of its DDP bucket (how a bucket reduced in place, outside the turn, is the
    gradient), where plain DDP leaves gradient_as_bucket_view off: .grad is a tensor of its own that DDP copies the
    reduced bucket into. A script keeping a .grad by reference across a backward found the next backward's gradient
    in it: gradient surgery (two backwards a step, the first task's gradients kept) measured another dot product at
    step 0 (0.76 for plain's 0.11) and the losses parted from step 1; last step's gradients kept read a cosine of 1.0
    with this step's from step 1 on (a probe, 2026-12-07). With zero_grad(set_to_none=False) plain DDP's kept
    tensors are the ones it zeroes and copies into: kept as such."""
    script, steps = ROOT / "tests/e2e/scripts/ddp_kept_gradients.py", 6
    variants = {"pcgrad": ["--case", "pcgrad"], "previous": ["--case", "previous"],
                "pcgrad-zeroed": ["--case", "pcgrad", "--set-to-none-false"]}
    alone, jobs = {}, []
    for name, extra in variants.items():
        alone[name] = plain_torchrun(script, "--steps", str(steps), *extra).stdout.splitlines()
        assert len(alone[name]) == steps, alone[name]
        quoted = ", ".join(f'"{arg}"' for arg in ["--steps", str(steps), *extra])
        (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{script}"\nargs = [{quoted}]\nnp = 2\n')
        jobs.append(str(tmp_path / f"{name}.toml"))
    report = _xover_run("--group", *jobs, "--mode", "crossover", "--policy", "work-conserving", "--json")
    assert {job["name"] for job in report["jobs"]} == set(variants)
    for job in report["jobs"]:
        assert job["status"] == "finished", job["error"]
        printed = [line for line in _rank0_stdout(job["log_dir"]).splitlines() if not line.startswith("XOVER-METRIC")]
        assert printed == alone[job["name"]], job["name"]


def test_the_shims_reduction_is_ddps_own_at_three_ranks(isolated_results):
    """At a world size that is not a power of two, multiplying by 1 / world size and dividing by it part in the last
    bit. DDP divides a sparse gradient (nn.Embedding(sparse=True)) by the world size and multiplies a dense one by
    the inverse while copying it into its bucket; the shim's hook multiplied both (a probe, 2026-12-07: the weights
    a rounding apart after ten steps). DDP also divides a dense gradient that is a view of its bucket already (a
    script that asked for gradient_as_bucket_view and kept its gradients between backwards), and leaves alone,
    without views, the gradient of a parameter no rank used (find_unused_parameters, a static graph's first
    iteration): the shim multiplied the first and averaged the second. Three ranks of a small script, the shim's
    hook and wait without turns, in every combination of set_to_none and views."""
    printed = plain_torchrun(ROOT / "tests/e2e/scripts/ddp_shim_scaling.py", nproc=3).stdout.split("\n")
    digests = {tuple(line.split()[:2]): line.split()[2] for line in printed if line.startswith(("bag/", "unused/", "static/"))}
    assert len(digests) == 24, printed
    for shape in ("bag", "unused", "static"):
        for set_to_none in ("True", "False"):
            for views in ("False", "True"):
                key = f"{shape}/set_to_none={set_to_none}/views={views}"
                assert digests[(key, "shim")] == digests[(key, "ddp")], key
