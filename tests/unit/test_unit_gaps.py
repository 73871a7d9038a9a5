"""What stands between two units on the same devices: the ssh calls of one unit's teardown and of the next one's
start go to every host at once, a unit's runs in one call per host (each ssh costs about 0.6 s on the emulated
cluster; docs/measurements.md, *Between two units*)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _fake_ssh(tmp_path, monkeypatch, body: str):
    """An `ssh` first on PATH that logs its arguments, then runs `body` (sh)."""
    ssh = tmp_path / "ssh"
    ssh.write_text(f'#!/bin/sh\necho "$*" >> "$0.calls"\n{body}\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return tmp_path / "ssh.calls"


def test_a_units_runs_are_swept_in_one_call_per_host_all_hosts_at_once(tmp_path, monkeypatch):
    from xover.processes import sweep

    calls = _fake_ssh(tmp_path, monkeypatch, "sleep 1")
    started = time.monotonic()
    sweep("XOVER_RUN", ["e-1-r7", "e-1-r8"], ["n1", "n2", "n3"], [])
    assert time.monotonic() - started < 2.5  # three hosts of 1 s each, at once
    lines = calls.read_text().splitlines()
    assert len(lines) == 3, lines  # one per host, not one per run and host
    assert all("xover.run.reaper --kill e-1-r7 --kill e-1-r8 --variable XOVER_RUN" in line for line in lines)


def test_the_reaper_stops_every_value_it_is_given(tmp_path):
    """`--kill A --kill B`: the processes of both tags, and nothing else."""
    tag = "XOVER_TEST_GAPS"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    tagged = {
        value: subprocess.Popen(sleeper, env={**os.environ, tag: value}) for value in ("gaps-a", "gaps-b", "gaps-c")
    }
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "xover.run.reaper", "--kill", "gaps-a", "--kill", "gaps-b", "--variable", tag],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stderr
        assert tagged["gaps-a"].wait(10) is not None and tagged["gaps-b"].wait(10) is not None
        assert tagged["gaps-c"].poll() is None  # another tag: left alone
    finally:
        for process in tagged.values():
            process.kill()
            process.wait()


def test_a_jobs_private_files_go_to_its_hosts_at_once(tmp_path, monkeypatch):
    from xover.run.external.horovodrun import private_files

    calls = _fake_ssh(tmp_path, monkeypatch, 'sleep 1; cat > /dev/null; echo "/tmp/xover-env-$$"')
    started = time.monotonic()
    files = private_files(4, "h1:1,h2:1,h3:1,h4:1", {"XOVER_METRIC_TOKEN": "t"}, [])
    assert time.monotonic() - started < 3.0  # four hosts of 1 s each, at once
    assert list(files) == ["h1", "h2", "h3", "h4"]  # each host its own file, in the order of -H
    assert len(set(files.values())) == 4 and all(path.startswith("/tmp/xover-env-") for path in files.values())
    assert calls.read_text().count("BatchMode=yes") == 4  # one ssh per host (its script spans lines)


def test_torchruns_nodes_get_their_own_settings_at_once_in_node_order(tmp_path, monkeypatch):
    from xover.run.external.torchrun import hand_over

    _fake_ssh(tmp_path, monkeypatch, 'sleep 1; cat > "$0.$$"; echo "$0.$$"')
    started = time.monotonic()
    paths = hand_over([("n1", {"node": 0}), ("n2", {"node": 1}), ("n3", {"node": 2})], [])
    assert time.monotonic() - started < 2.5
    assert [open(path).read() for path in paths] == ['{"node": 0}', '{"node": 1}', '{"node": 2}']


def test_a_local_nodes_settings_are_kept_in_the_runs_folder_and_removed_when_another_host_fails(tmp_path, monkeypatch):
    """Kept in /tmp before, a local node's file stayed there whenever its node never started to read it."""
    from xover.errors import XoverError
    from xover.run.external.torchrun import hand_over, remove_kept

    _fake_ssh(tmp_path, monkeypatch, "echo unreachable >&2; exit 255")
    run_folder = tmp_path / "ranks"
    run_folder.mkdir()
    with pytest.raises(XoverError, match="cannot reach n2"):
        hand_over([("localhost", {"node": 0}), ("n2", {"node": 1})], [], folder=run_folder)
    assert not list(run_folder.iterdir())  # no node will start to read it
    [path] = hand_over([("localhost", {"node": 0})], [], folder=run_folder)
    assert Path(path).parent == run_folder and oct(Path(path).stat().st_mode & 0o777) == "0o600"
    remove_kept(run_folder)  # the run's end: its node never read it
    assert not list(run_folder.iterdir())


def test_a_file_of_settings_sent_to_another_host_is_named_first_and_its_hosts_sweep_removes_only_such(
        tmp_path, monkeypatch):
    """A send that failed (or was cut short) may have made its file there: its name is known here before, for
    the unit's end to remove on that host (the reaper's --remove-sent, in the sweep's ssh); nothing else goes."""
    import tempfile

    from xover.errors import XoverError
    from xover.run.external.torchrun import KEPT_PREFIX, hand_over, take_sent
    from xover.run.reaper import main as reaper

    _fake_ssh(tmp_path, monkeypatch, "echo unreachable >&2; exit 255")
    run_folder = tmp_path / "ranks"
    with pytest.raises(XoverError, match="cannot reach n2"):
        hand_over([("n2", {"node": 1})], [], folder=run_folder)
    [name] = take_sent(run_folder)["n2"]
    assert name.startswith(KEPT_PREFIX) and take_sent(run_folder) == {}  # taken once
    there = tmp_path / "tmp"  # that host's temporary folder
    there.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(there))
    (there / name).write_text("{}")
    other = there / "not-ours"
    other.write_text("x")
    target = tmp_path / "target"
    target.write_text("x")
    (there / f"{KEPT_PREFIX}link").symlink_to(target)
    reaper(["--kill", "no-such-run", "--variable", "XOVER_RUN", "--remove-sent", name, "--remove-sent", "not-ours",
            "--remove-sent", f"{KEPT_PREFIX}link", "--remove-sent", f"{KEPT_PREFIX}/../../target"])
    assert sorted(p.name for p in there.iterdir()) == ["not-ours", f"{KEPT_PREFIX}link"] and target.exists()
