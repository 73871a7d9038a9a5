"""Output that cannot be written. A file named with --out on a full disk: the plan file was cut to its first
4,096 bytes and a report's file left empty, the file there before lost; `report --format csv` ended in a
TypeError. stdout or stderr closed by the shell (`>&-`, `2>&-`) failed every command at start, stdout on a full
device (`> /dev/full`) was a traceback, and a reader that left (`| head`) ended some commands with exit 1 and
others with 0. Now: one line, exit 2, the earlier file kept; a broken pipe exits 141 quietly, every command."""

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ci, recorded_runs

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "assets" / "replay"


@contextlib.contextmanager
def _small_tmpfs(folder: Path, size: str):
    """A tmpfs of `size` at `folder`, that the test fills: root's way to a full disk without filling a real one."""
    if os.geteuid() != 0:
        if ci():
            pytest.fail("mounting a tmpfs needs root, which CI has")
        pytest.skip("needs root: mounting a tmpfs")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        _unmount(folder)


def _unmount(folder: Path) -> None:
    """Unmounted, once what the test started has let go of it (a process of a failed run may still be exiting);
    never left mounted: lazily, failing the test, after 30 s."""
    deadline = time.monotonic() + 30
    while subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
            pytest.fail(f"{folder} was still in use 30 s after its test")
        time.sleep(0.5)


@pytest.fixture
def full_disk(tmp_path):
    """A tmpfs of 200 KiB."""
    with _small_tmpfs(tmp_path / "full", "200k") as folder:
        yield folder


@pytest.fixture
def store_disk(tmp_path):
    """A tmpfs of 2 MiB: room for a new store and a run's first iterations."""
    with _small_tmpfs(tmp_path / "store", "2m") as folder:
        yield folder


def _fill(folder: Path) -> None:
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _xover(*args, shell_redirect: str = "", cwd=ROOT, env=None) -> subprocess.CompletedProcess:
    """`xover ARGS`, its streams redirected as a shell would (`>&-`, `2>&-`, `> /dev/full`)."""
    command = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", sys.executable, "-m", "xover", *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


def _profiles(path: Path, jobs: int) -> Path:
    path.write_text("name,devices,compute_ms,comm_ms,memory_gb\n"
                    + "".join(f"job{index},1,{10 + index},{5 + index % 7},1\n" for index in range(jobs)))
    return path


def _leftovers(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.startswith(".xover-")]


def test_a_plan_that_cannot_be_written_leaves_the_earlier_plan_whole(full_disk, tmp_path):
    plan = full_disk / "plan.json"
    first = _xover("--db", tmp_path / "x.db", "plan", "--profiles", _profiles(tmp_path / "two.csv", 2),
                   "--devices", "1", "--out", plan)
    assert first.returncode == 0, first.stderr
    earlier = plan.read_text()
    _fill(full_disk)
    bigger = _xover("--db", tmp_path / "x.db", "plan", "--profiles", _profiles(tmp_path / "thirty.csv", 30),
                    "--devices", "4", "--out", plan)
    assert bigger.returncode == 2, bigger.stderr
    line = _one_line(bigger)
    assert f"--out {plan}: cannot write the plan file: No space left on device" in line
    assert "the file that was there is kept as it was" in line
    assert plan.read_text() == earlier and json.loads(earlier)["groups"]
    assert _leftovers(full_disk) == []


@pytest.fixture
def experiment_store(tmp_path):
    store, recorder, _ = recorded_runs(tmp_path, [{"name": "a", "mode": "solo", "hosts": "localhost:1", "np": 1,
                                                    "status": "finished"}])
    recorder.finish("finished")
    store.close()
    return tmp_path / "x.db"


@pytest.fixture
def simulation_store(tmp_path):
    made = _xover("--db", tmp_path / "sim.db", "simulate", TRACE / "fifo_srtf.csv", "--profiles",
                  TRACE / "profiles.csv", "--cluster", "1x2", "--policy", "fifo",
                  env={**os.environ, "XOVER_RESULTS": str(tmp_path / "results")})
    assert made.returncode == 0, made.stderr
    return tmp_path / "sim.db"


@pytest.mark.parametrize("kind", ["experiment", "simulation"])
@pytest.mark.parametrize(("fmt", "name"), [("csv", "r.csv"), ("json", "r.json"), ("html", "r.html")])
def test_a_report_that_cannot_be_written_names_its_file_and_keeps_the_earlier_one(full_disk, tmp_path, request,
                                                                                   kind, fmt, name):
    store = request.getfixturevalue(f"{kind}_store")
    out = full_disk / name
    out.write_text("the earlier report\n")
    _fill(full_disk)
    env = {**os.environ, "XOVER_RESULTS": str(tmp_path / "results")}
    done = _xover("--db", store, "report", "latest", "--format", fmt, "--out", out, env=env)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    assert f"cannot write {out}: No space left on device (the file that was there is kept as it was)" in line
    assert out.read_text() == "the earlier report\n"
    assert _leftovers(full_disk) == []


def test_a_closed_stdout_is_one_line_and_a_plan_is_still_written(experiment_store, tmp_path):
    closed = _xover("--db", experiment_store, "report", "all", shell_redirect=">&-")
    assert closed.returncode == 2
    assert _one_line(closed) == "error: cannot write to stdout: it is closed"
    plan = tmp_path / "plan.json"
    planned = _xover("--db", tmp_path / "p.db", "plan", "--profiles", _profiles(tmp_path / "two.csv", 2),
                     "--devices", "1", "--out", plan, shell_redirect=">&-")
    assert json.loads(plan.read_text())["groups"], planned.stderr  # the plan is the command's result


def test_a_closed_stderr_leaves_the_command_working(experiment_store):
    done = _xover("--db", experiment_store, "report", "all", shell_redirect="2>&-")
    assert done.returncode == 0 and "finished" in done.stdout


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_stdout_on_a_full_device_is_one_line_and_exit_2(experiment_store, tmp_path, fmt):
    done = _xover("--db", experiment_store, "report", "latest", "--format", fmt, shell_redirect="> /dev/full",
                  env={**os.environ, "XOVER_RESULTS": str(tmp_path / "results")})
    assert done.returncode == 2
    assert _one_line(done) == "error: cannot write to stdout: No space left on device"


@pytest.mark.parametrize("args", [["report", "latest"], ["report", "all"], ["report", "latest", "--format", "json"],
                                  ["report", "latest", "--format", "csv"], ["--help"]])
def test_a_reader_that_left_ends_every_command_quietly_with_141(experiment_store, tmp_path, args):
    env = {**os.environ, "XOVER_RESULTS": str(tmp_path / "results")}
    command = [sys.executable, "-m", "xover", "--db", str(experiment_store), *args]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader left before the first line (`| head -c 0`)
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 141
    assert stderr == b""


def test_a_run_whose_results_folder_is_full_ends_in_one_line_its_runs_kept_failed(full_disk, tmp_path):
    # a full results folder: `run` wrote each run's folder (tmpfs needs no space for one), then its spec.json
    # failed, ending in a traceback of two chained OSErrors (exit 1, the runs recorded failed)
    _fill(full_disk)
    store = tmp_path / "x.db"
    env = {**os.environ, "XOVER_RESULTS": str(full_disk / "results"), "XOVER_DB": str(store)}
    done = _xover("run", "--group", "mlp-digits", "mlp-digits", "--np", "1", "--iterations", "2", "--mode",
                  "crossover", env=env)
    assert done.returncode == 1, done.stderr
    line = _one_line(done)
    assert f"cannot write {full_disk}/results/runs/" in line and "No space left on device" in line, line
    assert "XOVER_RESULTS" in line and "free space" in line, line
    with sqlite3.connect(store) as connection:  # kept as the traceback kept them: failed, with why
        (experiment, status), = connection.execute("SELECT id, status FROM experiments").fetchall()
        runs = connection.execute("SELECT status, error FROM runs").fetchall()
    assert status == "failed" and f"experiment {experiment}" in line, line
    assert len(runs) == 2 and all(run == "failed" and "No space left on device" in why for run, why in runs), runs


def test_a_store_whose_disk_fills_during_a_run_ends_it_in_one_line_naming_the_experiment_and_its_logs(
        store_disk, tmp_path):
    """The store's disk full during a run ended it with the store's own line (exit 2, as for refused input), naming
    neither the experiment nor its logs; where a write still went through, `report` said "failed: no error
    recorded". Now: exit 1, one line with the store, why, what to do, the experiment and its logs; every process
    stopped; and what the store keeps says why, once it has room again."""
    from xover.processes import tagged_processes

    store, results = store_disk / "x.db", tmp_path / "results"
    env = {**os.environ, "XOVER_RESULTS": str(results), "XOVER_DB": str(store)}
    xover = subprocess.Popen([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "--np", "1", "--mode",
                              "sequential", "--iterations", "100000"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _iterations_stored(store):
            assert time.monotonic() < deadline and xover.poll() is None, "no iteration stored"
            time.sleep(0.2)
        with contextlib.closing(sqlite3.connect(store)) as connection:  # closed: the tmpfs is unmounted after
            (experiment,), = connection.execute("SELECT id FROM experiments").fetchall()
        _fill(store_disk)
        out, err = xover.communicate(timeout=240)
    finally:
        if xover.poll() is None:
            xover.kill()
            xover.wait()
    assert xover.returncode == 1, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert f"the store {store} failed during the run: database or disk is full (free space on the store's disk" in line
    assert f"experiment {experiment}" in line and f"its logs are in {results / 'runs' / experiment}" in line, line
    assert tagged_processes(experiment) == []
    (store_disk / "filler").unlink()  # room again: what the store kept is shown, and says why its runs ended
    report = _xover("report", experiment, env=env)
    assert report.returncode == 0, report.stderr
    [why] = [line for line in report.stdout.splitlines() if line.startswith("mlp-digits (sequential) ")]
    assert "no error recorded" not in why and "store" in why and "full" in why, why


def _iterations_stored(store: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(store)) as connection:
            return connection.execute("SELECT COUNT(*) FROM iteration_metrics").fetchone()[0] > 0
    except sqlite3.OperationalError:  # not made yet
        return False
