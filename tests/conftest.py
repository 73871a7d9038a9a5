import importlib.util
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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


def horovod_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("horovod") is not None and shutil.which("unshare") is not None


# A developer may skip the end-to-end tests (XOVER_SKIP_E2E=1); CI never does.
needs_horovod = pytest.mark.skipif(os.environ.get("XOVER_SKIP_E2E") == "1" and os.environ.get("CI") != "true",
                                   reason="XOVER_SKIP_E2E=1")


@pytest.fixture
def no_emulated_cluster_yet():
    """Tests that build their own emulated cluster: skipped without its requirements on a developer's
    machine, failed under CI=true; refused when one is already up (they would take it down)."""
    from xover.launch import cluster

    problems = cluster.missing_requirements()
    if problems:
        message = "emulated cluster unavailable: " + "; ".join(problems)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    if cluster.read_state() is not None or cluster.live_namespaces():
        pytest.fail("an emulated cluster is already up on this machine; these tests build their own: "
                    "`xover cluster down` first")
