"""A results folder xover cannot write (a read-only mount, a full disk): one line, exit 2, nothing recorded.
Before: `xover run`, `train` and `profile` ended with a traceback (OSError: Read-only file system), and `run`
left an experiment recorded as lost."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ci

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def read_only_results(tmp_path):
    """A folder mounted read-only (a bind mount of an empty one): root's only way to be refused a write."""
    if os.geteuid() != 0:
        if ci():
            pytest.fail("a read-only bind mount needs root, which CI has")
        pytest.skip("needs root: a read-only bind mount")
    source, mounted = tmp_path / "source", tmp_path / "results"
    source.mkdir()
    mounted.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(mounted)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        yield mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


@pytest.mark.parametrize("command", [
    ["run", "--group", "mlp-digits", "mlp-digits", "--mode", "sequential", "--iterations", "2"],
    ["train", "mlp-digits", "--iterations", "2"],
    ["profile", "mlp-digits", "--iterations", "10", "--no-corun"],
])
def test_a_results_folder_xover_cannot_write_is_one_line_and_nothing_is_recorded(read_only_results, tmp_path,
                                                                                   command):
    store = tmp_path / "x.db"
    env = {**os.environ, "XOVER_RESULTS": str(read_only_results), "XOVER_DB": str(store)}
    done = subprocess.run([sys.executable, "-m", "xover", *command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"cannot create {read_only_results}/runs/" in done.stderr and "Read-only file system" in done.stderr
    assert "XOVER_RESULTS" in done.stderr, done.stderr
    with sqlite3.connect(store) as connection:
        assert connection.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
