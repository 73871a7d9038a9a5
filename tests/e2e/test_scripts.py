"""Unmodified scripts in a crossover group: turns are taken, and the script's losses match; a script's engine is
found from its imports, and a failed job's reason is printed under the table."""

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
HOROVOD_SCRIPT = "recipes/examples/horovod_digits.py"
TWO_OPTIMIZERS = "tests/e2e/scripts/horovod_two_optimizers.py"
JOBS = ("horovod_digits", "horovod_two_optimizers")


def _printed_losses(log_dir):
    text = (Path(log_dir) / "ranks" / "rank.0" / "stdout").read_text()
    return re.findall(r"loss ([0-9.]+)", text)


@pytest.fixture(scope="module")
def two_horovod_scripts(tmp_path_factory):
    """The example Horovod script and one with two DistributedOptimizers stepping on one backward, each also
    all-reducing its logged loss, alone and in crossover under both policies: what the tests below read
    (one comparison serves them, since every run of it costs seconds of process starts: docs/measurements.md,
    *make test's time*). The example also has a head it uses on every third step only, whose parameters
    Horovod's step all-reduces as zeros on the others, and centres its features on a mean over every rank's
    batch (an hvd.allreduce differentiated through, whose gradient's all-reduce runs in backward)."""
    folder = tmp_path_factory.mktemp("two-horovod-copies")
    env = {**os.environ, "XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", HOROVOD_SCRIPT, "--script", TWO_OPTIMIZERS,
                             "--mode", "sequential,crossover", "--policy", "all", "--json",
                             "--", "--steps", "40", "--average-loss", "--auxiliary-every", "3",
                             "--center-by-allreduce"], capture_output=True, text=True, timeout=900,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return {(j["name"], j["mode"], j["policy"]): j for j in json.loads(result.stdout)["jobs"]}


def test_plain_horovod_scripts_in_crossover(two_horovod_scripts):
    """Two optimizers stepping on one backward make one iteration (before: two, and the job's steps were
    counted double), each waiting for its all-reduces outside the turn."""
    jobs = two_horovod_scripts
    assert set(jobs) == {(n, m, p) for n in JOBS
                         for m, p in (("sequential", None), ("crossover", "work-conserving"), ("crossover", "round-robin"))}
    for job in jobs.values():
        assert job["status"] == "finished" and job["iterations"] == 40  # the runtime counted the steps
        assert job["samples_per_s"] > 0
        # only crossover (on a CPU) keeps the engine's threads from preempting the partner's compute
        assert job["comm_threads"] == ("batch" if job["mode"] == "crossover" else "normal")
        # a run's folder names its policy: --policy all runs each job under crossover once a policy
        assert Path(job["log_dir"]).name.endswith(job["mode"] + (f"-{job['policy']}" if job["policy"] else "")), job
    for name in JOBS:
        alone = _printed_losses(jobs[(name, "sequential", None)]["log_dir"])
        assert len(alone) == 5  # steps 0, 10, 20, 30 and the final loss
        assert _printed_losses(jobs[(name, "crossover", "work-conserving")]["log_dir"]) == alone


def test_a_horovod_script_that_all_reduces_its_loss_does_not_hold_the_turn_in_it(two_horovod_scripts):
    # hvd.allreduce after optimizer.step() is called while the job holds its turn: blocking in it there
    # could deadlock two jobs each waiting for the other's turn on one device (broken only by the lease); so
    # could Horovod's step, all-reducing zeros for the head unused on two steps in three, and the backward of
    # the all-reduce in the loss (before: a turn taken back after 30 s on each, the losses the same)
    jobs = two_horovod_scripts
    for key, job in jobs.items():
        assert job["status"] == "finished" and job["iterations"] == 40, key
        if job["mode"] == "crossover":
            assert job["turn_stats"]["revoked"] == 0, key  # no turn had to be taken back
    for name in JOBS:
        alone = _printed_losses(jobs[(name, "sequential", None)]["log_dir"])
        assert len(alone) == 5
        for policy in ("work-conserving", "round-robin"):
            assert _printed_losses(jobs[(name, "crossover", policy)]["log_dir"]) == alone


def test_two_copies_of_a_horovod_script_with_collectives_in_its_step_and_backward_keep_their_turns(isolated_results):
    """Two copies of a script with its head used on every third step (Horovod's step all-reduces zeros for its
    parameters on the others) and its features centred through an hvd.allreduce (whose gradient's all-reduce
    runs in backward): each job ran those collectives holding its turn, its peer rank waiting for a turn the
    other copy held in the same state, until the lease took it back (30 s each by default; here 5). Now they run
    outside the turn: no turn is taken back (the losses: the fixture above, whose example script has both).
    Both options in one run (it was a run each): either collective held in the turn has a turn taken back."""
    script = "tests/e2e/scripts/horovod_unused_head.py"
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", script, "--script", script,
                             "--mode", "crossover", "--json", "--", "--steps", "12", "--aux-every", "3",
                             "--center-by-allreduce"],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "XOVER_TURN_LEASE": "floor=5,factor=1000,initial=5"})
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) == 2
    for job in jobs:
        assert job["status"] == "finished" and job["iterations"] == 12, job
        assert job["turn_stats"]["revoked"] == 0, job["turn_stats"]


def test_a_horovod_script_with_fp16_compression_and_a_process_set_of_its_own_keeps_its_losses(isolated_results):
    """hvd.add_process_set was refused in every mode, though a collective on a process set runs outside the turn
    as any other (hvd.init(process_sets=...) was never refused); and with hvd.Compression.fp16 the gradient bytes
    were counted as float32, twice what is sent, for the planner's link time. Now the script runs, each step's
    loss as under plain horovodrun, its bytes half its float32 gradients'. It also clips as Horovod's documentation
    does (synchronize, clip, step under skip_synchronize): the wait in its own synchronize() was counted as data
    time, 0.01-0.02 ms of communication an iteration against 9-15 ms now (2026-12-06), and a plan saw a job that
    does not communicate."""
    from xover.run.external.horovodrun import horovodrun_path

    script = "tests/e2e/scripts/horovod_unused_head.py"
    args = ["--steps", "8", "--aux-every", "3", "--fp16-allreduce", "--process-set", "--clip"]
    env = {**os.environ, "HOROVOD_DYNAMIC_PROCESS_SETS": "1"}
    alone = subprocess.run([horovodrun_path(), "-np", "2", "-H", "localhost:2", sys.executable, script, *args],
                           capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert alone.returncode == 0, alone.stderr[-3000:]
    alone_losses = re.findall(r"<stdout>:rank 0 step \d+ loss ([0-9.]+)", alone.stdout)
    assert len(alone_losses) == 8
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", script, "--script", script,
                             "--mode", "crossover", "--json", "--", *args],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) == 2
    for job in jobs:
        assert job["status"] == "finished" and job["iterations"] == 8, job
        assert job["turn_stats"]["revoked"] == 0, job["turn_stats"]
        assert job["communication_ms"] > max(1.0, job["data_ms"]), job  # the wait in the script's synchronize()
        output = (Path(job["log_dir"]) / "ranks" / "rank.0" / "stdout").read_text()
        assert re.findall(r"<stdout>:rank 0 step \d+ loss ([0-9.]+)", output) == alone_losses
        assert len(re.findall(r"<stdout>:rank 0's set: loss", output)) == 8
        records = [record for record in map(parse_metric_line, output.splitlines()) if record]
        [start] = [record for record in records if record["kind"] == "start"]
        [end] = [record for record in records if record["kind"] == "end"]
        assert end["gradient_bytes"] * 2 == start["gradient_bytes"], (start, end)  # every step sends every gradient


@pytest.fixture(scope="module")
def uneven_and_elastic(tmp_path_factory):
    """The Horovod scripts of the two tests below in one crossover group, each the other's partner (each test was a
    group of two copies of its script): the uneven one capped at 8 steps by its job file, the elastic one at its
    own length. (name -> the job's run)"""
    folder = tmp_path_factory.mktemp("uneven-and-elastic")
    files = []
    for name, script, cap in (("uneven-join", "tests/e2e/scripts/horovod_uneven_join.py", "iterations = 8\n"),
                              ("elastic", "tests/e2e/scripts/horovod_elastic.py", "")):
        (folder / f"{name}.toml").write_text(f'name = "{name}"\nscript = "{ROOT / script}"\nnp = 2\n{cap}')
        files.append(str(folder / f"{name}.toml"))
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", *files, "--mode", "crossover", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env={**os.environ, "XOVER_DB": str(folder / "xover.db"),
                                 "XOVER_RESULTS": str(folder / "results")})
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert len(jobs) == 2
    return {job["name"]: job for job in jobs}


def test_a_horovod_script_whose_ranks_join_after_uneven_data_stops_at_its_step_cap(uneven_and_elastic):
    """Rank 0 steps 10 times an epoch, rank 1 6 times and waits in hvd.join(): capped at 8 steps, rank 0 ended
    at its 8th while rank 1 waited for it to join, and rank 1 failed ("Horovod has been shut down"), so the job
    did. Now the capped rank joins on its way out and rank 1 stops in its join."""
    job = uneven_and_elastic["uneven-join"]
    assert job["mode"] == "crossover"
    assert job["status"] == "finished" and job["iterations"] == 8, job
    ranks = Path(job["log_dir"]) / "ranks"
    assert len(re.findall(r"rank 0 epoch 0 batch \d loss", (ranks / "rank.0" / "stdout").read_text())) == 8
    assert len(re.findall(r"rank 1 epoch 0 batch \d loss", (ranks / "rank.1" / "stdout").read_text())) == 6


def test_the_commits_of_a_horovod_elastic_script_run_outside_the_turn(uneven_and_elastic):
    """TorchState's commit and check_host_updates broadcast after the step, where the job holds its turn, through
    functions Horovod's elastic state imported before the shim wrapped them: each ran in the turn, blocked on the
    peer rank, and two copies in crossover could wait on each other's turns (a run of every mode hung for 10
    minutes). Now each steps out of the turn, counted as a yield (before: no iteration yielded)."""
    job = uneven_and_elastic["elastic"]
    assert job["mode"] == "crossover"
    assert job["status"] == "finished" and job["iterations"] == 16, job
    output = (Path(job["log_dir"]) / "ranks" / "rank.0" / "stdout").read_text()
    iterations = [record for record in map(parse_metric_line, output.splitlines()) if record and record["kind"] == "iter"]
    assert len(iterations) == 16
    assert sum(1 for record in iterations if record["yields"]) >= 8, [record["yields"] for record in iterations]


def test_a_horovod_script_on_one_rank_records_its_batches_and_keeps_its_losses(isolated_results):
    """Horovod hooks no gradient in a world of one rank, and lists no parameter to update: the shim, told of
    none, found no model (no turn taken in its forward, no batch), and every iteration recorded 0 samples, the
    job 0 parameters (samples/s '-'). Now each iteration records its batch of 32, the job its parameters and
    gradient bytes as at any size; each copy takes a turn for its compute in crossover, the losses as alone."""
    from xover.run.external.horovodrun import horovodrun_path

    steps = 12
    alone = subprocess.run([horovodrun_path(), "-np", "1", "-H", "localhost:1", sys.executable, HOROVOD_SCRIPT,
                            "--steps", str(steps)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert alone.returncode == 0, alone.stderr[-3000:]
    alone_losses = re.findall(r"loss ([0-9.]+)", alone.stdout)
    assert len(alone_losses) == 3  # steps 0 and 10, and the final loss
    # crossover only: the reference is the script alone under plain horovodrun (a sequential run under xover adds
    # two launches and no path: the shim finds the model and counts the batches in any mode)
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", HOROVOD_SCRIPT, "--script",
                             HOROVOD_SCRIPT, "--np", "1", "--mode", "crossover", "--json", "--",
                             "--steps", str(steps)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert [job["mode"] for job in jobs] == ["crossover", "crossover"], jobs
    for job in jobs:
        assert job["status"] == "finished" and job["iterations"] == steps, job
        assert job["samples_per_s"] > 0, job
        # one rank under horovodrun keeps no rank logs: its lines are in the launcher's
        log = (Path(job["log_dir"]) / "launcher.log").read_text()
        records = [record for record in map(parse_metric_line, log.splitlines()) if record]
        [start] = [record for record in records if record["kind"] == "start"]
        assert start["world_size"] == 1 and start["parameters"] == 85002, start  # the model's 64-256-256-10
        assert start["gradient_bytes"] == 4 * 85002, start
        iterations = [record for record in records if record["kind"] == "iter"]
        assert [record["samples"] for record in iterations] == [32] * steps, job["name"]
        assert re.findall(r"<stdout>:(?:step \d+|final) loss ([0-9.]+)", log) == alone_losses, job["name"]
        assert f"{iterations[0]['loss']:.8f}" == alone_losses[0]
        assert job["turn_stats"]["grants"] >= steps, job["turn_stats"]  # a turn for each step's compute


def test_a_ddp_script_runs_under_torchrun_without_engine_given(isolated_results):
    # its engine is found from what it imports (torch.distributed), and said on one line; one job of one rank
    # (two DDP copies taking turns under torchrun: tests/e2e/test_ddp.py)
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "recipes/examples/ddp_digits.py",
                             "--np", "1", "--mode", "sequential", "--json", "--", "--steps", "30"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert [(j["name"], j["mode"]) for j in jobs] == [("ddp_digits", "sequential")]
    for job in jobs:
        assert job["status"] == "finished" and job["engine"] == "torch" and job["iterations"] == 30, job["error"]
    assert "engine torch (torchrun): recipes/examples/ddp_digits.py imports torch.distributed" in result.stderr


def _stopped_at_its_length(asset: str, np: int, iterations: int, steps: int) -> tuple[dict, str, str]:
    """tests/assets/`asset` run alone for `iterations` of its `steps`: its job, rank 0's stdout and stderr."""
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", f"tests/assets/{asset}", "--np",
                             str(np), "--mode", "sequential", "--iterations", str(iterations), "--json", "--",
                             "--steps", str(steps)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    [job] = json.loads(result.stdout)["jobs"]
    rank0 = Path(job["log_dir"]) / "ranks"
    [stdout], [stderr] = rank0.glob("**/attempt_*/0/stdout.log"), rank0.glob("**/attempt_*/0/stderr.log")
    return job, stdout.read_text(), stderr.read_text()


def test_a_script_stopped_at_its_length_ends_though_a_thread_of_its_own_waits_for_its_stop(isolated_results):
    """A writer thread the script stops after its loop: at the job's length the loop is left, the stop never comes,
    and the rank waited for the thread as Python would, for ever."""
    job, _, said = _stopped_at_its_length("ddp_writer_thread.py", np=1, iterations=3, steps=1000)
    assert job["status"] == "finished" and job["iterations"] == 3, job
    assert "the script's thread 'writer' still ran 10 s after the job's length stopped its loop" in said, said


def test_a_script_that_catches_the_stop_at_its_length_ends_at_its_next_batch(isolated_results):
    """A bare `except:` around each step caught the stop (a SystemExit) at the job's length, and the script went on
    to its own count: every batch after it loaded, forwarded and stopped again, a "failed, going on" line each."""
    job, printed, said = _stopped_at_its_length("ddp_bare_except.py", np=2, iterations=3, steps=40)
    assert job["status"] == "finished" and job["iterations"] == 3, job
    assert re.findall(r"^step (\d+) (?:loss \S+|failed, going on)$", printed, re.MULTILINE) == ["0", "1", "2", "3"]
    assert "finished" not in printed, printed
    assert "the script caught the stop at its job's length" in said, said


def test_a_finalizer_in_a_cycle_runs_as_at_pythons_exit_with_its_log_open_and_its_process_group(isolated_results):
    """A rank's end closed the script's files and destroyed its process group, then collected the garbage: a tracker
    in a cycle that met its peers at a barrier and wrote a summary to its log found neither (a probe, 2026-12-07).
    The collection comes first now, as at Python's exit: the log reads as under plain torchrun."""
    plain = isolated_results / "plain"
    plain.mkdir()
    plain_torchrun("tests/assets/ddp_finalizer_in_cycle.py", "--log-file", f"{plain}/log")
    alone = {rank: (plain / f"log.rank{rank}").read_text() for rank in (0, 1)}
    assert alone[0].endswith("summary: met at a barrier\n"), alone
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/ddp_finalizer_in_cycle.py",
                             "--np", "2", "--mode", "sequential", "--json", "--", "--log-file", "{job_dir}/log"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    [job] = json.loads(result.stdout)["jobs"]
    assert job["status"] == "finished", job
    out = Path(job["log_dir"]) / "out"
    assert {rank: (out / f"log.rank{rank}").read_text() for rank in (0, 1)} == alone


def test_an_optimizer_stepped_inside_backward_ends_each_iteration_and_stops_at_the_length(isolated_results):
    """Steps taken in a post-accumulate-grad hook ended an iteration one backward late: the first was no iteration,
    the last one's loss was lost, and `--iterations 5` let a sixth update through."""
    job, stdout, _ = _stopped_at_its_length("ddp_optimizer_in_backward.py", np=1, iterations=5, steps=1000)
    printed = re.findall(r"^step (\d+) loss (\S+)$", stdout, re.MULTILINE)
    assert [int(step) for step, _ in printed] == [0, 1, 2, 3, 4], printed  # five updates, as asked
    assert job["iterations"] == 5 and job["final_loss"] == float(printed[-1][1]), job


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
    # the experiment ran to its end with its job failed: the listing says failed, not finished
    listed = subprocess.run([sys.executable, "-m", "xover", "report", "all", "--format", "json"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [row["status"] for row in json.loads(listed.stdout)["experiments"]] == ["failed"]


@pytest.mark.parametrize(("code", "said"), [
    ("3", "failed: rank 1: exited with code 3, no traceback  (log: "),
    ("0", "failed: rank 1: left early: its script ended with exit 0 after 8 iterations while its peers still expected "
          "it; then rank 0: RuntimeError: "),
])
def test_a_rank_that_dies_without_a_word_is_blamed_not_its_peers_knock_on_error(isolated_results, code, said):
    """Rank 1 calls os._exit(3): rank 0's 'Connection reset by peer' was blamed, not the rank torchrun names. Rank 1
    calls sys.exit(0) after 8 steps: no launcher counts that a failure, and rank 0's 'Connection closed by peer' was
    the job's whole reason, rank 1 unnamed; now it is named with its iterations, rank 0's error after it."""
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/ddp_rank_exits.py",
                             "--mode", "sequential", "--np", "2", "--", "--code", code,
                             "--after", "3" if code != "0" else "8"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if "ddp_rank_exits (sequential) failed" in line]
    assert said in line, line


def test_a_rank_that_exits_with_its_reason_and_no_traceback_is_blamed_with_that_reason(isolated_results):
    """Rank 1 stops with `raise SystemExit("bad config: ...")`: Python prints the message on stderr and exits with
    code 1, no traceback; the job's reason was 'rank 1: exited with code 1, no traceback' (a probe session,
    2026-12-07)."""
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/ddp_bad_config.py",
                             "--mode", "sequential", "--np", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if "ddp_bad_config (sequential) failed" in line]
    assert "failed: rank 1: bad config: --lr must be positive, got -1  (log: " in line, line


@pytest.mark.parametrize("silence", ["python", "fd"])
def test_a_script_that_silences_its_output_still_has_its_iterations_recorded(isolated_results, silence):
    """Issue 58: records were written to whatever `sys.stdout` was, so a script that silenced its training
    loop (`contextlib.redirect_stdout(io.StringIO())`, or fd 1 pointed at /dev/null) lost every one of
    them: the run finished with no iterations. They go to the standard output the launcher gave the rank."""
    # one rank (--np 1): its records go to the standard output its launcher gave it, whatever the ranks' number
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/quiet_stdout.py",
                             "--mode", "sequential", "--np", "1", "--json", "--", "--steps", "8", "--silence",
                             silence], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [job] = json.loads(result.stdout)["jobs"]
    assert job["status"] == "finished" and job["iterations"] == 8, job
