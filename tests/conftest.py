"""Shared by every test folder: tests/unit/ (pure logic, no process started), tests/integration/ (the store,
the CLI through CliRunner or a process that launches nothing, services such as PostgreSQL and the turn
server) and tests/e2e/ (real horovodrun, torchrun, ssh and Slurm processes).

Every test under tests/e2e/ gets the `e2e` marker (likewise `unit` and `integration`), so `-m "not e2e"`
selects the rest. XOVER_SKIP_E2E=1 skips tests/e2e/ on a developer's machine, and says so; under
CI=true it is an error, not a skip: a CI runs everything. `make test` runs two pytest-xdist workers
(`-n 2 --dist loadgroup`); the groups below keep what shares the machine on one of them.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xover.settings import LEASE_DIR_VARIABLE

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e")
COMPARISON_ITERATIONS = 10  # of the session's comparison run (comparison_run)


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
        # `make test` runs two workers (pytest -n 2): each leases "this machine's devices" in a folder of
        # its own, or their runs would wait for each other's devices; within a worker leases work as ever
        os.environ[LEASE_DIR_VARIABLE] = config.xover_lease_dir = tempfile.mkdtemp(prefix=f"xover-test-leases-{worker}-")


def pytest_unconfigure(config):
    if getattr(config, "xover_lease_dir", None):
        shutil.rmtree(config.xover_lease_dir, ignore_errors=True)


# Tests that share something of the whole machine run on one worker, one after another (pytest-xdist's
# loadgroup); every other test is grouped by its module, whose module-scoped runs it shares.
MACHINE_WIDE_MODULES = {  # whole modules: some of their tests also check that nothing of theirs is left
    "test_cluster.py": "cluster", "test_cluster_run.py": "cluster", "test_cluster_cli.py": "cluster",  # namespaces
    "test_slurm_emulated.py": "cluster",  # Slurm on the emulated hosts
    "test_slurm_cluster.py": "slurm", "test_slurm_launch.py": "slurm",  # the one slurmctld of scripts/slurm.sh
    "test_postgres.py": "postgres", "test_postgres_store.py": "postgres",
}
MACHINE_WIDE_FIXTURES = {
    "cluster": ("no_emulated_cluster_yet",),  # a test elsewhere that builds an emulated cluster
    "comparison": ("comparison_run",),  # a session's run: once per worker, so on one
}


def xdist_group_of(item) -> str:
    if item.path.name in MACHINE_WIDE_MODULES:
        return MACHINE_WIDE_MODULES[item.path.name]
    names = set(getattr(item, "fixturenames", ()))
    for group, fixtures in MACHINE_WIDE_FIXTURES.items():
        if names.intersection(fixtures):
            return group
    return item.path.name


def pytest_report_header(config):
    if skipping_e2e():
        return "XOVER_SKIP_E2E=1: the end-to-end tests (tests/e2e/) are skipped"
    return None


def kind_of(path: Path) -> str | None:
    """unit, integration or e2e: the folder of tests/ a test file is in."""
    try:
        folder = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in KINDS else None


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="XOVER_SKIP_E2E=1: end-to-end test skipped (CI runs it)")
    skipped = 0
    for item in items:
        kind = kind_of(item.path)
        if kind:
            item.add_marker(getattr(pytest.mark, kind))
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
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


@pytest.fixture(autouse=True)
def isolated_results(tmp_path, monkeypatch):
    """Every test gets its own database and results folder; the repo's results/ is never touched."""
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "xover.db"))
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(ROOT)
    yield tmp_path


@pytest.fixture
def no_emulated_cluster_yet():
    """Tests that build their own emulated cluster: skipped without its requirements on a developer's
    machine, failed under CI=true; refused when one is already up (they would take it down)."""
    require_no_emulated_cluster_yet()


def require_no_emulated_cluster_yet() -> None:
    """no_emulated_cluster_yet, for a fixture of a wider scope (a cluster a whole module shares)."""
    from xover.launch import cluster

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
    """mlp-digits + resnet-digits in all three modes (default policy) through the real CLI and horovodrun,
    once for the session, in a store of its own: what tests/e2e/test_report_of_a_run.py reports on, and
    the jobs alone under Horovod that tests/e2e/test_engines.py compares the torch engine with."""
    folder = tmp_path_factory.mktemp("comparison")
    paths = {"XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "resnet-digits",
                             "--mode", "all", "--iterations", str(COMPARISON_ITERATIONS), "--json"],
                            env={**os.environ, **paths}, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {**paths, "experiment": json.loads(result.stdout)["experiment"], "folder": folder}


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
