"""A results folder xover cannot write (a read-only mount, a full disk): one line, exit 2, nothing recorded.
Before: `xover run`, `train` and `profile` ended with a traceback (OSError: Read-only file system), and `run`
left an experiment recorded as lost."""

import json
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


def test_a_store_in_a_folder_xover_cannot_write_is_reported_as_it_stands(read_only_results, tmp_path):
    # another user's results, a read-only mount: `xover report` said "unable to open database file" (SQLite's WAL
    # makes its -shm file beside the store)
    source = tmp_path / "source"  # what read_only_results mounts read-only
    trace = ROOT / "tests" / "assets" / "replay"
    made = subprocess.run([sys.executable, "-m", "xover", "--db", str(source / "x.db"), "simulate",
                           str(trace / "fifo_srtf.csv"), "--profiles", str(trace / "profiles.csv"), "--cluster", "1x2",
                           "--policy", "fifo"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    before = sorted(path.name for path in source.iterdir())

    env = {**os.environ, "XOVER_RESULTS": str(tmp_path / "mine")}  # the pictures go to a folder of the reader's

    def report(*args):
        return subprocess.run([sys.executable, "-m", "xover", "--db", str(read_only_results / "x.db"), "report",
                               *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    listed = report("all")
    assert listed.returncode == 0, listed.stderr
    assert "simulate" in listed.stdout and "finished" in listed.stdout
    shown = report("latest", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert '"policy": "fifo"' in shown.stdout
    relative = subprocess.run([sys.executable, "-m", "xover", "--db", "x.db", "report", "all"], cwd=read_only_results,
                              env=env, capture_output=True, text=True, timeout=300)
    assert relative.returncode == 0 and "simulate" in relative.stdout, relative.stderr
    assert sorted(path.name for path in source.iterdir()) == before  # nothing made beside it
    # writes still in its WAL (a writer beside it): read-only, they would be missed; refused, saying what to do
    with sqlite3.connect(source / "x.db") as writer:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE experiments SET command = command || ' '")
        writer.commit()
        refused = report("all")
    assert refused.returncode == 2
    line = refused.stderr.strip()
    assert "x.db-wal holds writes not yet in the file: copy both into a folder you can write" in line, line
    assert "\n" not in line and "Traceback" not in line


def test_a_report_of_a_results_folder_xover_cannot_write_is_shown_without_its_pictures(read_only_results, tmp_path):
    # another user's results, a read-only mount: `xover report` (table, json, `all`, a simulation's json) ended in
    # `error: cannot write the pictures into .../runs/<id>: Read-only file system`, exit 2, nothing on stdout
    from test_report import _hand_made_store

    source = tmp_path / "source"  # what read_only_results mounts read-only
    _hand_made_store(source / "x.db")
    trace = ROOT / "tests" / "assets" / "replay"
    made = subprocess.run([sys.executable, "-m", "xover", "--db", str(source / "x.db"), "simulate",
                           str(trace / "fifo_srtf.csv"), "--profiles", str(trace / "profiles.csv"), "--cluster", "1x2",
                           "--policy", "fifo"], cwd=ROOT, env={**os.environ, "XOVER_RESULTS": str(tmp_path / "sim")},
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    before = sorted(str(path.relative_to(source)) for path in source.rglob("*"))
    env = {**os.environ, "XOVER_RESULTS": str(read_only_results), "XOVER_DB": str(read_only_results / "x.db")}

    def report(*args):
        done = subprocess.run([sys.executable, "-m", "xover", "report", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def warned(done, folder):
        lines = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
        assert len(lines) == 1, done.stderr
        assert str(folder) in lines[0] and "Read-only file system" in lines[0], done.stderr

    run = "20260101-000000-plan"
    table = report(run)
    assert "crossover" in table.stdout
    warned(table, read_only_results / "runs" / run)
    shown = report(run, "--format", "json")
    assert json.loads(shown.stdout)["pictures"] is None  # not written: null, where {} is "nothing to draw"
    warned(shown, read_only_results / "runs" / run)
    listed = report("all")
    assert run in listed.stdout and "simulate" in listed.stdout
    warned(listed, read_only_results)
    simulation = report("latest", "--format", "json")
    data = json.loads(simulation.stdout)
    assert data["pictures"] is None and data["replays"][0]["policy"] == "fifo"
    warned(simulation, read_only_results / "runs" / data["experiment"]["id"])
    # a page written elsewhere still has its pictures inline, drawn in a folder of its own
    page = tmp_path / "page.html"
    html = report(run, "--format", "html", "--out", str(page))
    warned(html, read_only_results / "runs" / run)
    assert page.read_text().count("data:image/png;base64,") >= 3
    assert sorted(str(path.relative_to(source)) for path in source.rglob("*")) == before


def test_a_simulation_against_a_store_it_cannot_write_says_the_stores_line_not_the_traces(read_only_results,
                                                                                          tmp_path):
    """A trace naming its models by their stored profiles, replayed against a read-only store: the store's failure
    was blamed on the trace ("t.csv: line 2: model 'mlp-digits': cannot open the database ..."), a valid trace.
    Now it is the store's line as `plan` gives it, exit 2, nothing about the trace's lines."""
    from test_simulate_cli import store_torch_profiles

    store_torch_profiles(tmp_path / "source" / "x.db")  # in what read_only_results mounts read-only
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,gpus,duration_s,model\n0,2,100,mlp-digits\n0,2,100,resnet-digits\n")
    env = {**os.environ, "XOVER_RESULTS": str(tmp_path / "mine")}

    def xover(*args):
        done = subprocess.run([sys.executable, "-m", "xover", "--db", str(read_only_results / "x.db"), *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr.strip()

    line = xover("simulate", str(trace), "--cluster", "1x2", "--engine", "torch")
    assert "read-only to you" in line and "line 2" not in line and str(trace) not in line, line
    assert line == xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--engine", "torch")
