"""Shared by every test folder: tests/unit/ (pure logic, no process started), tests/integration/ (the store,
the CLI through CliRunner or a process that launches nothing, services such as PostgreSQL and the turn
server) and tests/e2e/ (real horovodrun, torchrun, ssh and Slurm processes).

Every test under tests/e2e/ gets the `e2e` marker (likewise `unit` and `integration`), so `-m "not e2e"`
selects the rest. XOVER_SKIP_E2E=1 skips tests/e2e/ on a developer's machine, and says so; under
CI=true it is an error, not a skip: a CI runs everything. `make test` runs three pytest-xdist workers
(`-n 3 --dist loadfile`); what the whole machine has once is used under a lock (machine_lock).
"""

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xover.analysis import LEAST_OVERLAP
from xover.hints import GivenStore
from xover.settings import LEASE_DIR_VARIABLE, METRICS_CREDENTIALS_VARIABLE

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e")
# of the session's comparison run (comparison_run): long enough that mlp-digits (10-20 ms an iteration) still
# runs when resnet-digits' warm-up (its first five, up to a second or more under load) ends, or the two never
# overlap in the concurrent run (docs/measurements.md, *Other benchmarks*: the overlaps at 60 and 150 under load)
COMPARISON_ITERATIONS = 150


def ci() -> bool:
    return os.environ.get("CI") == "true"


def skipping_e2e() -> bool:
    return os.environ.get("XOVER_SKIP_E2E") == "1"


def pytest_configure(config):
    if skipping_e2e() and ci():
        raise pytest.UsageError("XOVER_SKIP_E2E=1 under CI=true: a CI runs every test, the end-to-end ones "
                                "included; unset XOVER_SKIP_E2E")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and LEASE_DIR_VARIABLE not in os.environ:
        # `make test` runs three workers (pytest -n 3): each leases "this machine's devices" in a folder of
        # its own, or their runs would wait for each other's devices; within a worker leases work as ever
        config.xover_lease_dir = tempfile.mkdtemp(prefix=f"xover-test-leases-{worker}-")
        os.environ[LEASE_DIR_VARIABLE] = config.xover_lease_dir
    if METRICS_CREDENTIALS_VARIABLE not in os.environ:
        # the metrics' token and TLS certificate (xover/turns/credentials.py) of this session, made on first
        # use in a folder of mode 0700: a user's own ~/.config/xover/metrics is never touched
        config.xover_metrics_credentials = tempfile.mkdtemp(prefix="xover-test-metrics-")
        os.environ[METRICS_CREDENTIALS_VARIABLE] = config.xover_metrics_credentials


def pytest_report_header(config):
    if skipping_e2e():
        return "XOVER_SKIP_E2E=1: the end-to-end tests (tests/e2e/) are skipped"
    return None


def pytest_unconfigure(config):
    if getattr(config, "xover_metrics_credentials", None):
        shutil.rmtree(config.xover_metrics_credentials, ignore_errors=True)
    if getattr(config, "xover_lease_dir", None):
        shutil.rmtree(config.xover_lease_dir, ignore_errors=True)


# What the whole machine has once (the emulated cluster's namespaces, the single-node Slurm cluster,
# a PostgreSQL server): the tests that use one hold its lock while they do, whichever pytest-xdist worker
# runs them (`make test`: -n 3 --dist loadfile, a module's tests on one worker) and whichever pytest
# session (two on one machine wait for each other). A lock is the kernel's (flock): it dies with its holder.
MACHINE_WIDE_MODULES = {  # modules that hold one for all their tests (some check that nothing is left)
    "test_cluster.py": "cluster", "test_cluster_run.py": "cluster", "test_cluster_cli.py": "cluster",
    "test_slurm_emulated.py": "cluster",  # Slurm on the emulated hosts
    "test_slurm_cluster.py": "slurm", "test_slurm_launch.py": "slurm",  # the one slurmctld of scripts/slurm.sh
    "test_postgres.py": "postgres", "test_postgres_store.py": "postgres",
}
LOCK_DIR = Path(tempfile.gettempdir())


def machine_lock(name: str):
    """Hold the machine-wide lock `name` (waiting for it) for the duration of a with block."""
    return file_lock(LOCK_DIR / f"xover-tests-{name}.lock")


@contextlib.contextmanager
def file_lock(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture(scope="module", autouse=True)
def machine_wide_module(request):
    """The lock of a MACHINE_WIDE_MODULES module, before any of its own fixtures (autouse come first)."""
    name = MACHINE_WIDE_MODULES.get(request.path.name)
    if name is None:
        yield
        return
    with machine_lock(name):
        yield


def kind_of(path: Path) -> str | None:
    """unit, integration or e2e: the folder of tests/ a test file is in."""
    try:
        folder = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in KINDS else None


# make test's order (-n 3 --dist loadfile). What the machine has once is one unit of work: its modules run
# one after another on one worker, which then never waits for another worker's hold of the lock. The
# heaviest units go first (from `make test --durations`; a rough order is enough), so that the last
# minutes are not one worker alone: xdist would hand out the modules with the most tests first.
HEAVIEST_FIRST = ("cluster", "test_faults.py", "test_run.py", "test_ddp.py", "test_script_jobs.py",
                  "test_framework_scripts.py", "test_gpu_check_dry_run.py", "test_scripts.py", "slurm",
                  "test_accelerate_loops.py", "test_loader_workers.py", "test_profile_plan.py",
                  "test_adaptive_group.py",
                  "test_report_of_a_run.py", "test_engines.py", "test_train.py", "postgres")


def work_unit(path: str | Path) -> str:
    """The lock of a MACHINE_WIDE_MODULES module, else the module's file name."""
    name = Path(path).name
    return MACHINE_WIDE_MODULES.get(name, name)


def _order(item) -> tuple[int, int]:
    unit = work_unit(item.path)
    kind = kind_of(item.path)
    return (HEAVIEST_FIRST.index(unit) if unit in HEAVIEST_FIRST else len(HEAVIEST_FIRST),
            ("e2e", "integration", "unit").index(kind) if kind else 3)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class MachineWideUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return MACHINE_WIDE_MODULES.get(Path(path).name, path)

    config.option.loadscopereorder = False  # the collection's order (_order), not the most tests first
    return MachineWideUnits(config, log)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_order)  # stable: a module's tests stay together, in their order
    skip = pytest.mark.skip(reason="XOVER_SKIP_E2E=1: end-to-end test skipped (CI runs it)")
    skipped = 0
    for item in items:
        kind = kind_of(item.path)
        if kind:
            item.add_marker(getattr(pytest.mark, kind))
        if skipping_e2e() and item.get_closest_marker("e2e"):
            item.add_marker(skip)
            skipped += 1
    if skipped:
        config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"XOVER_SKIP_E2E=1: skipping {skipped} end-to-end tests (tests/e2e/)", yellow=True)


def load_bench(script: str):
    """A bench script (bench/SCRIPT.py) as a module, for tests of its pure parts."""
    spec = importlib.util.spec_from_file_location(script, ROOT / "bench" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# /tmp turned mode 0700 twice in the middle of a `make test` (PostgreSQL's own user could not enter it
# any more, and every later test that needed it failed): which test did it is not known yet. Each test
# checks that /tmp is as it found it; the one that changed it (or one running beside it on the other
# xdist worker) fails and says so, and /tmp is put back, so that the tests after it are not hurt.
SHARED_TMP = Path("/tmp")


@pytest.fixture(autouse=True)
def tmp_left_as_found(request):
    before = SHARED_TMP.stat()
    yield
    after = SHARED_TMP.stat()
    if (after.st_mode, after.st_uid) != (before.st_mode, before.st_uid):
        os.chown(SHARED_TMP, before.st_uid, before.st_gid)
        os.chmod(SHARED_TMP, before.st_mode & 0o7777)
        pytest.fail(f"/tmp changed during {request.node.nodeid} (or a test beside it on the other xdist worker): "
                    f"mode {before.st_mode & 0o7777:o} -> {after.st_mode & 0o7777:o}, owner {before.st_uid} -> "
                    f"{after.st_uid}; put back", pytrace=False)


@pytest.fixture(autouse=True)
def isolated_results(tmp_path, monkeypatch):
    """Every test gets its own database and results folder; the repo's results/ is never touched."""
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "xover.db"))
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(ROOT)
    # the --db an earlier test's command line gave is not repeated in this one's printed commands (hints.py)
    monkeypatch.setattr(GivenStore, "db", None)
    yield tmp_path


@pytest.fixture
def no_emulated_cluster_yet(request):
    """Tests that build their own emulated cluster: skipped without its requirements on a developer's
    machine, failed under CI=true; refused when one is already up (they would take it down). Holds the
    cluster's lock while the test runs (a module of MACHINE_WIDE_MODULES holds it already)."""
    if MACHINE_WIDE_MODULES.get(request.path.name) == "cluster":
        require_no_emulated_cluster_yet()
        yield
        return
    with machine_lock("cluster"):
        require_no_emulated_cluster_yet()
        yield


def require_no_emulated_cluster_yet() -> None:
    """no_emulated_cluster_yet, for a fixture of a wider scope (a cluster a whole module shares)."""
    from xover.emulation import cluster

    problems = cluster.missing_requirements()
    if problems:
        message = "emulated cluster unavailable: " + "; ".join(problems)
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    if cluster.read_state() is not None or cluster.live_namespaces():
        pytest.fail("an emulated cluster is already up on this machine; these tests build their own: "
                    "`xover cluster down` first")


@pytest.fixture(scope="session")
def comparison_run(tmp_path_factory):
    """mlp-digits + resnet-digits in all three modes through the real CLI and horovodrun, once for the whole
    test run (pytest-xdist's workers share it: the first to ask makes it), in a store of its own: what
    tests/e2e/test_report_of_a_run.py reports on, and the jobs alone under Horovod that
    tests/e2e/test_engines.py compares the torch engine with.

    Crossover takes turns under round-robin: strict alternation keeps the two together from the start, where
    work-conserving lets mlp-digits iterate freely while resnet-digits' first all-reduces are slow, and under a
    loaded CI that was its whole run (crossover overlap 0.0 in stop 74's CI)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's
    folder = shared / "comparison"
    paths = {"XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    done = folder / "experiment"
    folder.mkdir(exist_ok=True)
    with file_lock(shared / "comparison.lock"):
        if not done.exists():
            result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "resnet-digits",
                                     "--mode", "sequential,concurrent,crossover", "--iterations",
                                     str(COMPARISON_ITERATIONS), "--policy", "round-robin", "--json"],
                                    env={**os.environ, **paths}, cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stderr[-3000:]
            done.write_text(json.loads(result.stdout)["experiment"])
    return {**paths, "experiment": done.read_text(), "folder": folder}


# torch's Gloo now and then aborts a finished rank at exit (about 1 run in 60 here; 7 in 12 for a script whose
# optimizer is a ZeroRedundancyOptimizer, after its last line: tests/e2e/scripts/ddp_zero.py): xover's ranks are
# spared it (runtime/worker.py: exit_without_teardown), a script's reference run under plain torchrun is not
TEARDOWN_ABORT = "terminate called without an active exception"
REFERENCE_TRIES = 3


def plain_torchrun(script: Path | str, *args: str, cwd: Path | str | None = None,
                   fresh: Path | None = None, nproc: int = 2) -> subprocess.CompletedProcess:
    """A script alone under torchrun on two ranks (`nproc`), nothing of xover involved: a test's reference. Run again
    when only that abort at exit failed it, and taken as it is after the last try: what it printed is the
    reference, and a run cut short would fail the caller's comparison of every line. Any other failure is
    asserted against. `fresh`: a folder the script keeps state in (a checkpoint it resumes from), emptied before
    each try: a second try resumed from the first's last step and printed no loss at all (CI, stop 83's check)."""
    from xover.run.external.torchrun import torchrun_path

    for _ in range(REFERENCE_TRIES):
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
        result = subprocess.run([torchrun_path(), "--standalone", f"--nproc-per-node={nproc}", str(script), *args],
                                capture_output=True, text=True, timeout=300, cwd=cwd or ROOT)
        if result.returncode == 0 or TEARDOWN_ABORT not in result.stderr:
            break
    assert result.returncode == 0 or TEARDOWN_ABORT in result.stderr, result.stderr[-3000:]
    return result


def plain_horovodrun(script: Path | str, *args: str, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    """A Horovod script alone under horovodrun on two local ranks, nothing of xover involved: a test's
    reference; asserted to have exited 0."""
    from xover.run.external.horovodrun import horovodrun_path

    result = subprocess.run([horovodrun_path(), "-np", "2", "-H", "localhost:2", sys.executable, str(script), *args],
                            capture_output=True, text=True, timeout=300, cwd=cwd or ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def recorded_losses(db: Path, experiment: str) -> dict[tuple[str, str, str | None], list[float]]:
    """(job, mode, policy) -> the losses xover recorded in an experiment, one per optimizer step."""
    import sqlite3

    with sqlite3.connect(db) as connection:
        rows = connection.execute("select r.name, r.mode, r.policy, m.loss from iteration_metrics m join runs r on "
                                  "r.id = m.run_id where r.experiment_id = ? order by r.id, m.step",
                                  (experiment,)).fetchall()
    found: dict[tuple[str, str, str | None], list[float]] = {}
    for name, mode, policy, loss in rows:
        found.setdefault((name, mode, policy), []).append(loss)
    return found


def recorded_runs(tmp_path: Path, runs: list[dict]):
    """A store at tmp_path/x.db with experiment 'e1' open and a run of recipe 'a' for each of `runs` (each
    the Run's fields beyond the experiment and recipe); (store, its Recorder, the runs' ids in order)."""
    from xover.run.record import Recorder
    from xover.store.models import RecipeSnapshot, Run
    from xover.store.session import open_store

    store = open_store(str(tmp_path / "x.db"))
    recorder = Recorder(store, "e1")
    recorder.open("run", "xover run", None, None)
    with store.session() as session, session.begin():
        snapshot = RecipeSnapshot(hash="h", name="a", path="a.toml", body={})
        session.add(snapshot)
        session.flush()
        added = [Run(experiment_id="e1", recipe_id=snapshot.id, **fields) for fields in runs]
        session.add_all(added)
        session.flush()
        ids = [run.id for run in added]
    return store, recorder, ids


def iteration_losses(store: Path | str, experiment: str) -> dict[tuple[str, str], list[float]]:
    """(job, mode) -> its loss at each iteration, for one experiment of a store (an SQLite file, or a
    SQLAlchemy URL such as PostgreSQL's)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(store if isinstance(store, str) and "://" in store else f"sqlite:///{store}")
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT r.name, r.mode, m.loss FROM iteration_metrics m JOIN runs r "
                                           "ON r.id = m.run_id WHERE r.experiment_id = :experiment "
                                           "ORDER BY r.id, m.step"), {"experiment": experiment}).fetchall()
    finally:
        engine.dispose()
    out: dict = {}
    for name, mode, loss in rows:
        out.setdefault((name, mode), []).append(loss)
    return out


def wait_for_iterating_runs(db: Path, runs: int, iterations: int = 5, timeout_s: float = 240) -> list[tuple]:
    """(Slurm job id, experiment) of the runs of an SQLite store that have `iterations` rows each, once
    there are `runs` of them (the store may not exist yet); an AssertionError after `timeout_s`."""
    import sqlite3
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with sqlite3.connect(db) as connection:
                counts = connection.execute("SELECT r.launcher_job_id, r.experiment_id, COUNT(m.id) FROM runs r JOIN "
                                            "iteration_metrics m ON m.run_id = r.id GROUP BY r.id").fetchall()
        except sqlite3.OperationalError:
            counts = []
        ready = [(job_id, experiment) for job_id, experiment, count in counts if count >= iterations]
        if len(ready) >= runs:
            return ready
        time.sleep(0.5)
    raise AssertionError(f"fewer than {runs} runs reached {iterations} iterations in {timeout_s:.0f} s")


def gpu_check_stand_in(tmp_path: Path, record: str = "$*") -> tuple[Path, Path]:
    """A stand-in for the GPU check's `python`: `-m xover ...` is recorded (one line per call, `record`
    expanded by the shell) and answered, everything else runs on this Python. Returns it and the calls file."""
    import stat

    calls = tmp_path / "xover-calls"
    stand_in = tmp_path / "python"
    stand_in.write_text(f"""#!/bin/sh
if [ "$1" = -m ] && [ "$2" = xover ]; then
  shift 2
  echo "{record}" >>{calls}
  case $1 in run) echo '{{"experiment": "stand-in", "jobs": []}}' ;; report) echo '{{"jobs": []}}' ;; esac
  exit 0
fi
exec {sys.executable} "$@"
""")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    return stand_in, calls


def measured_or_apart(group: dict, way: str) -> bool:
    """A group's figure for `way` (concurrent, crossover, adaptive) in `xover report/run --json`: a positive gain,
    or none because its jobs did not run together long enough to measure sharing: never past their warm-up
    (overlap 0.0; on a loaded machine a short job can end before its partner's warm-up does), or for a window too
    short to measure in and under LEAST_OVERLAP of the way's run (analysis.compare: its whole runs, mostly alone,
    would read as a gain). Tests of what a run records assert this, not that the machine was fast enough for the
    jobs to meet."""
    gain = group.get(f"{way}_vs_sequential")
    if gain is not None:
        return gain > 0
    overlap = group.get(f"{way}_overlap")
    return overlap is not None and overlap < LEAST_OVERLAP


SIGNALLED_IN = """
import importlib, signal, sys
module, name = sys.argv[1].rsplit(".", 1)
original = getattr(importlib.import_module(module), name)

def signalled(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)
    return original(*args, **kwargs)

setattr(importlib.import_module(module), name, signalled)
from xover.cli import app
app(args=sys.argv[2:], prog_name="xover")
"""


def signalled_xover(where: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`xover ARGS` in a process of its own, SIGTERM raised in it as `where` (a dotted function name) is called."""
    return subprocess.run([sys.executable, "-c", SIGNALLED_IN, where, *args], capture_output=True, text=True,
                          timeout=timeout)
