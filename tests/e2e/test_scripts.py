"""Unmodified scripts in a crossover group: turns are taken, and the script's losses match; a script's engine is
found from its imports, and a failed job's reason is printed under the table."""

import json
import re
import subprocess
import sys
from pathlib import Path


def _printed_losses(log_dir):
    text = (Path(log_dir) / "ranks" / "rank.0" / "stdout").read_text()
    return re.findall(r"loss ([0-9.]+)", text)


def test_two_copies_of_a_plain_horovod_script_in_crossover(isolated_results):
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "recipes/examples/horovod_digits.py",
                             "--script", "recipes/examples/horovod_digits.py", "--mode", "sequential,crossover", "--json",
                             "--", "--steps", "30"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {(j["name"], j["mode"]): j for j in json.loads(result.stdout)["jobs"]}
    assert set(jobs) == {(n, m) for n in ("horovod_digits", "horovod_digits#2") for m in ("sequential", "crossover")}
    for job in jobs.values():
        assert job["status"] == "finished" and job["iterations"] == 30  # the runtime counted the steps
        assert job["samples_per_s"] > 0
        # only crossover (on a CPU) keeps the engine's threads from preempting the partner's compute
        assert job["comm_threads"] == ("batch" if job["mode"] == "crossover" else "normal")
    for name in ("horovod_digits", "horovod_digits#2"):
        alone = _printed_losses(jobs[(name, "sequential")]["log_dir"])
        assert len(alone) == 4  # steps 0, 10, 20 and the final loss
        assert _printed_losses(jobs[(name, "crossover")]["log_dir"]) == alone


def test_a_horovod_script_that_all_reduces_its_loss_does_not_hold_the_turn_in_it(isolated_results):
    # hvd.allreduce after optimizer.step() is called while the job holds its turn: blocking in it there
    # could deadlock two jobs each waiting for the other's turn on one device (broken only by the lease)
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "recipes/examples/horovod_digits.py",
                             "--script", "recipes/examples/horovod_digits.py", "--mode", "sequential,crossover", "--policy", "all",
                             "--json",
                             "--", "--steps", "40", "--average-loss"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    jobs = {(j["name"], j["mode"], j["policy"]): j for j in report["jobs"]}
    for key, job in jobs.items():
        assert job["status"] == "finished" and job["iterations"] == 40, key
        if job["mode"] == "crossover":
            assert job["turn_stats"]["revoked"] == 0, key  # no turn had to be taken back
    for name in ("horovod_digits", "horovod_digits#2"):
        alone = _printed_losses(jobs[(name, "sequential", None)]["log_dir"])
        assert len(alone) == 5
        for policy in ("work-conserving", "round-robin"):
            assert _printed_losses(jobs[(name, "crossover", policy)]["log_dir"]) == alone


def test_a_ddp_script_runs_under_torchrun_without_engine_given(isolated_results):
    # its engine is found from what it imports (torch.distributed), and said on one line
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "recipes/examples/ddp_digits.py",
                             "--script", "recipes/examples/ddp_digits.py", "--mode", "crossover", "--json", "--",
                             "--steps", "30"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert {(j["name"], j["mode"]) for j in jobs} == {("ddp_digits", "crossover"), ("ddp_digits#2", "crossover")}
    for job in jobs:
        assert job["status"] == "finished" and job["engine"] == "torch" and job["iterations"] == 30, job["error"]
    assert "engine torch (torchrun): recipes/examples/ddp_digits.py imports torch.distributed" in result.stderr


def test_a_failed_jobs_reason_and_log_are_printed_under_the_table(isolated_results):
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/ddp_boom.py",
                             "--mode", "sequential", "--np", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    runs = isolated_results / "results" / "runs"
    [line] = [line for line in result.stdout.splitlines() if "RuntimeError: boom" in line]
    match = re.fullmatch(r"ddp_boom \(sequential\) failed: rank \d: RuntimeError: boom  \(log: (\S+)\)", line)
    assert match, line
    log_dir = Path(match.group(1))
    assert log_dir.is_dir() and runs in log_dir.parents
    assert result.stdout.index("ddp_boom (sequential) failed") > result.stdout.index("xover run  experiment")
