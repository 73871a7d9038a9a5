"""Unmodified DistributedDataParallel scripts under torchrun in crossover groups (real torchrun, Gloo,
np=2): every loss the script prints is the one it prints under plain torchrun, whatever the mode or
turn policy, next to a copy of itself or next to a recipe; scripts that cannot be crossed over are
refused with one line naming them."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xover.launch.torchrun import torchrun_path
from xover.scripts import ScriptRefused, check_ddp_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "examples/ddp_digits.py"
STEPS = 30
LOSS_LINE = re.compile(r"^(?:step \d+|final) loss \S+$", re.MULTILINE)
TEARDOWN_ABORT = "terminate called without an active exception"


def _printed_losses(text: str) -> list[str]:
    return LOSS_LINE.findall(text)


def _rank0_losses(log_dir: str) -> list[str]:
    """What rank 0 of a job printed, from the rank logs torchrun kept for xover."""
    [stdout] = Path(log_dir).glob("ranks/**/attempt_*/0/stdout.log")
    return _printed_losses(stdout.read_text())


def _plain_torchrun(*script_args: str) -> list[str]:
    """The script alone under torchrun, nothing of xover involved."""
    for _ in range(2):
        result = subprocess.run([torchrun_path(), "--standalone", "--nproc-per-node=2", SCRIPT, *script_args],
                                capture_output=True, text=True, timeout=300, cwd=ROOT)
        # torch's Gloo now and then aborts a finished rank at exit (about 1 run in 60 here, see
        # runtime/worker.py: exit_without_teardown); this reference run has no xover to spare it that
        if result.returncode == 0 or TEARDOWN_ABORT not in result.stderr:
            break
    assert result.returncode == 0, result.stderr[-3000:]
    losses = _printed_losses(result.stdout)
    assert len(losses) == STEPS + 1  # one per step, and the final loss
    return losses


def _xover_run(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--engine", "torch", *args],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _assert_two_copies_keep_the_losses(script_args: list[str]) -> dict:
    alone = _plain_torchrun(*script_args)
    report = _xover_run("--script", SCRIPT, "--script", SCRIPT, "--mode", "all", "--policy", "all", "--json",
                        "--", *script_args)
    runs = {(j["name"], j["mode"], j["policy"]): j for j in report["jobs"]}
    assert set(runs) == {(name, mode, policy) for name in ("ddp_digits", "ddp_digits#2")
                         for mode, policy in (("sequential", None), ("concurrent", None),
                                              ("crossover", "work-conserving"), ("crossover", "round-robin"))}
    for (name, mode, policy), job in runs.items():
        assert job["status"] == "finished", job["error"]
        assert job["samples_per_s"] > 0
        assert _rank0_losses(job["log_dir"]) == alone, (name, mode, policy)
        if mode == "crossover":
            assert job["turn_stats"]["grants"] >= 2 * STEPS  # a turn per compute phase, on both devices
    return runs


def test_two_copies_of_a_ddp_script_keep_plain_torchrun_losses(isolated_results):
    runs = _assert_two_copies_keep_the_losses(["--steps", str(STEPS), "--log-every", "1"])
    for job in runs.values():
        assert job["iterations"] == STEPS  # one per backward, counted by the shim
        assert job["communication_ms"] > 0  # the wait for the all-reduces, before the step
        assert job["comm_threads"] == ("batch" if job["mode"] == "crossover" else "normal")


def test_frozen_unused_batchnorm_and_no_sync_keep_plain_torchrun_losses(isolated_results):
    """find_unused_parameters (a frozen layer, a head never used), BatchNorm buffers that DDP broadcasts
    in forward, two micro-batches per step with the first inside no_sync(), and a dist.all_reduce of the
    logged loss in the loop (a collective the shim runs outside the turn)."""
    runs = _assert_two_copies_keep_the_losses(["--steps", str(STEPS), "--log-every", "1", "--frozen",
                                               "--batchnorm", "--accumulate", "2", "--average-loss"])
    for job in runs.values():
        assert job["iterations"] == 2 * STEPS  # a no_sync backward ends a compute phase too


def test_a_ddp_script_next_to_a_recipe(isolated_results):
    # recipes and scripts in one group: the recipes after --group, the scripts' own arguments after --
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "--script", SCRIPT,
                             "--engine", "torch", "--mode", "all", "--policy", "all", "--iterations", "20", "--json",
                             "--", "--steps", str(STEPS), "--log-every", "1"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {(j["name"], j["mode"], j["policy"]): j for j in json.loads(result.stdout)["jobs"]}
    assert all(job["status"] == "finished" for job in jobs.values())
    alone = _rank0_losses(jobs[("ddp_digits", "sequential", None)]["log_dir"])
    assert len(alone) == STEPS + 1
    for policy in ("work-conserving", "round-robin"):
        script, recipe = jobs[("ddp_digits", "crossover", policy)], jobs[("mlp-digits", "crossover", policy)]
        assert _rank0_losses(script["log_dir"]) == alone
        assert recipe["final_loss"] == jobs[("mlp-digits", "sequential", None)]["final_loss"]
        assert script["turn_stats"]["grants"] >= 2 * STEPS and recipe["turn_stats"]["grants"] >= 2 * 20


# ---------------------------------------------------------------------------- refusals


def test_a_script_without_ddp_is_refused_before_it_starts(tmp_path):
    with pytest.raises(ScriptRefused, match=r"--script examples/horovod_digits.py: no DistributedDataParallel"):
        check_ddp_script("examples/horovod_digits.py")
    # inside torchrun the shim refuses it too, before the script runs (horovod is never imported)
    result = subprocess.run([sys.executable, "-m", "xover.runtime.script_shim", "torch", "examples/horovod_digits.py"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("xover: --script examples/horovod_digits.py: no DistributedDataParallel")


def test_xover_refuses_a_script_without_ddp_with_exit_2(isolated_results):
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--engine", "torch", "--script",
                             "examples/horovod_digits.py", "--mode", "crossover"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 2
    assert "examples/horovod_digits.py" in result.stderr and "DistributedDataParallel" in result.stderr
    assert not (isolated_results / "results" / "runs").exists() or not any(
        (isolated_results / "results" / "runs").iterdir())  # nothing started


@pytest.mark.parametrize("line, problem", [
    ("model.register_comm_hook(None, hook)", "communication hook"),
    ("model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)", "SyncBatchNorm"),
])
def test_what_cannot_be_crossed_over_is_refused(tmp_path, line, problem):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(torch.nn.Linear(2, 2))
        {line}
    """))
    with pytest.raises(ScriptRefused, match=f"--script {re.escape(str(script))}: .*{problem}"):
        check_ddp_script(script)


def test_ddp_built_in_a_module_next_to_the_script_is_found(tmp_path):
    (tmp_path / "helpers.py").write_text("from torch.nn.parallel import DistributedDataParallel as DDP\n")
    (tmp_path / "train.py").write_text("from helpers import DDP\n")
    check_ddp_script(tmp_path / "train.py")
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(ScriptRefused, match=r"broken.py: line 1: not valid Python"):
        check_ddp_script(tmp_path / "broken.py")


# ---------------------------------------------------------------------------- leaving


def test_a_finished_rank_leaves_without_the_interpreters_teardown_and_loses_nothing():
    """What Python does at exit still happens (threads joined, atexit handlers, streams flushed), then
    the process ends before the teardown where Gloo sometimes aborts."""
    program = textwrap.dedent("""
        import atexit, sys, threading, time
        from xover.runtime.worker import exit_without_teardown
        atexit.register(lambda: print("atexit ran", flush=False))
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
        sys.stdout.write("unflushed")
        exit_without_teardown()
        print("never")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["unflushedthread finished", "atexit ran"]
