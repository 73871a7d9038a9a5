"""A script's ranks under xover have the environment they have under plain torchrun where it changes what they
compute or import: the user's OMP_NUM_THREADS (their environment's, or a job file's `env`) gives torch its threads,
and a package of the user's named like a folder of xover's checkout (bench/) is theirs."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import plain_horovodrun, plain_torchrun

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests/e2e/scripts/ddp_thread_sums.py"
HOROVOD_SCRIPT = ROOT / "tests/e2e/scripts/horovod_thread_sums.py"
LINE = re.compile(r"^(?:THREADS|LOSS|BENCH) .*$", re.MULTILINE)
STEPS = "4"
RANK0 = "[0]<stdout>:"  # what horovodrun puts before each line of rank 0's


def _lines(text: str) -> list[str]:
    return LINE.findall(text)


def _rank0_lines(log_dir: str) -> list[str]:
    [stdout] = Path(log_dir).glob("ranks/**/attempt_*/0/stdout.log")
    return _lines(stdout.read_text())


def _xover_run(*args: str, cwd: Path = ROOT) -> dict:
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--json", *args], capture_output=True, text=True,
                            timeout=600, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _assert_as_plain(report: dict, alone: list[str], modes: set[str]) -> None:
    assert {job["mode"] for job in report["jobs"]} == modes
    for job in report["jobs"]:
        assert job["status"] == "finished", job["error"]
        assert _rank0_lines(job["log_dir"]) == alone, (job["name"], job["mode"])


@pytest.fixture(scope="module")
def two_threads_alone() -> list[str]:
    """The script alone under plain torchrun with OMP_NUM_THREADS=2 (nothing of xover involved): the reference of
    the two tests below, one run for both (it was a run each, the same)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "2")
        patch.delenv("XOVER_THREADS_PER_RANK", raising=False)
        return _lines(plain_torchrun(SCRIPT, "--steps", STEPS).stdout)


def test_the_users_omp_num_threads_gives_the_ranks_their_threads_and_plain_torchruns_losses(isolated_results,
                                                                                           monkeypatch,
                                                                                           two_threads_alone):
    """Before: every rank ran on 1 thread (XOVER_THREADS_PER_RANK's default) where plain torchrun's ran on the user's
    2, and the first loss differed in its last bits (0x1.68eaf2p+0 against 0x1.68eaf4p+0), in every mode, silently."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("XOVER_THREADS_PER_RANK", raising=False)
    alone = two_threads_alone
    assert alone[0] == "THREADS 2 OMP_NUM_THREADS=2" and len(alone) == 1 + int(STEPS)
    report = _xover_run("--engine", "torch", "--script", str(SCRIPT), "--script", str(SCRIPT),
                        "--mode", "sequential,crossover", "--", "--steps", STEPS)
    _assert_as_plain(report, alone, {"sequential", "crossover"})


def test_a_job_files_omp_num_threads_gives_its_ranks_their_threads(isolated_results, monkeypatch, tmp_path,
                                                                   two_threads_alone):
    """The job file's `env = { OMP_NUM_THREADS = "2" }` (the docs' own example of a job file's env): before, 1 thread."""
    monkeypatch.delenv("XOVER_THREADS_PER_RANK", raising=False)
    alone = two_threads_alone  # the reference: plain torchrun with the job file's variable
    assert alone[0] == "THREADS 2 OMP_NUM_THREADS=2" and len(alone) == 1 + int(STEPS)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    job = tmp_path / "threads2.toml"
    job.write_text(f'name = "threads2"\nscript = "{SCRIPT}"\nargs = ["--steps", "{STEPS}"]\nnp = 2\n'
                   'env = { OMP_NUM_THREADS = "2" }\n')
    report = _xover_run("--group", str(job), str(job), "--mode", "sequential,crossover")
    _assert_as_plain(report, alone, {"sequential", "crossover"})


def test_a_horovod_scripts_ranks_compute_on_the_users_omp_num_threads(isolated_results, monkeypatch):
    """horovodrun sets no OMP_NUM_THREADS and passes the user's on: its ranks compute on 2 threads, and so do xover's
    (before: 1, and the first loss differed)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("XOVER_THREADS_PER_RANK", raising=False)
    alone = _lines(plain_horovodrun(HOROVOD_SCRIPT, "--steps", STEPS).stdout.replace(RANK0, ""))
    assert alone[0] == "THREADS 2 OMP_NUM_THREADS=2" and len(alone) == 1 + int(STEPS)
    report = _xover_run("--engine", "horovod", "--script", str(HOROVOD_SCRIPT), "--mode", "sequential", "--",
                        "--steps", STEPS)
    [job] = report["jobs"]
    assert job["status"] == "finished", job["error"]
    assert _lines((Path(job["log_dir"]) / "ranks" / "rank.0" / "stdout").read_text().replace(RANK0, "")) == alone


@pytest.mark.parametrize("started_in", ["elsewhere", "the checkout"])
def test_a_users_bench_package_is_the_one_the_script_imports(isolated_results, monkeypatch, tmp_path, started_in):
    """Before: xover's checkout went first on the ranks' PYTHONPATH (and, started from the checkout, the shim's
    `python -m` put the working folder on sys.path where `python SCRIPT` puts the script's): its bench/ stood in for
    the user's, and the script failed, `AttributeError: module 'bench' has no attribute 'LR'` (plain torchrun ran
    it). The xover package is still found there (`xover` is no package of the user's)."""
    (tmp_path / "userlib" / "bench").mkdir(parents=True)
    (tmp_path / "userlib" / "bench" / "__init__.py").write_text("LR = 0.05\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "userlib"))
    cwd = ROOT if started_in == "the checkout" else tmp_path
    alone = _lines(plain_torchrun(SCRIPT, "--steps", STEPS, "--lr-from-bench", cwd=cwd).stdout)
    # this checkout's xover for the run started elsewhere (not an installed one), and nothing else of the checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "userlib"), str(ROOT / "pythonpath")]))
    assert f"BENCH {tmp_path / 'userlib' / 'bench' / '__init__.py'}" in alone
    report = _xover_run("--engine", "torch", "--script", str(SCRIPT), "--mode", "sequential", "--",
                        "--steps", STEPS, "--lr-from-bench", cwd=cwd)
    _assert_as_plain(report, alone, {"sequential"})
