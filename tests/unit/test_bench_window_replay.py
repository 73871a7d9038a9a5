"""bench/window_replay.py: windows placed and measured as adaptive's controller does, replayed on a store's rows."""

import sqlite3

import pytest
from conftest import load_bench


def _points(iteration_s, seconds, start=0.0):
    count = int(seconds / iteration_s)
    return [(start + iteration_s * (step + 1), step + 1.0) for step in range(count)]


def test_steady_runs_read_one_in_every_window_and_windows_open_at_the_slowest_jobs_ends():
    bench = load_bench("window_replay")
    points = {"a": _points(0.125, 20), "b": _points(0.25, 20)}  # times a float holds exactly
    windows = bench.controller_windows(points, 1.5)
    assert windows[0] == (1.0, 2.25)  # the slow job's fourth end; closed where both passed 0.8 of 1.5 s
    assert windows[1] == (1.25, 2.5) and len(windows) == 80 - 4 - 4
    whole, reads = bench.replay(points, {"a": 0.0625, "b": 0.125}, 1.5)
    assert whole == pytest.approx(1.0)
    assert reads and all(read == pytest.approx(1.0) for read in reads)


def test_a_slow_start_reads_low_in_the_first_window_and_high_after_it():
    bench = load_bench("window_replay")
    slow_start = _points(0.3, 3.0)  # ten iterations at 0.3 s, then 0.1 s
    slow_start += [(3.0 + 0.1 * (step + 1), 11.0 + step) for step in range(170)]
    whole, reads = bench.replay({"a": slow_start, "b": _points(0.3, 20)}, {"a": 0.05, "b": 0.15}, 1.5)
    assert reads[0] < 0.8 and reads[-1] > 1.0  # the whole holds the slow start, a late window does not


def _store(path):
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, experiment_id TEXT, group_index INTEGER, slot INTEGER, name TEXT, "
        "mode TEXT, policy TEXT, status TEXT);"
        "CREATE TABLE iteration_metrics (run_id INTEGER, step INTEGER, wall_time FLOAT, iteration_s FLOAT, compute_s FLOAT);"
        "CREATE TABLE sharing_segments (run_id INTEGER, seq INTEGER, kind TEXT, way TEXT, window JSON);"
    )
    runs = [  # mode, policy, {name: (iteration, compute)}
        ("sequential", None, {"a": (0.1, 0.08), "b": (0.3, 0.1)}),
        ("concurrent", None, {"a": (0.2, 0.15), "b": (0.5, 0.2)}),
        ("crossover", "work-conserving", {"a": (0.15, 0.08), "b": (0.4, 0.1)}),
        ("adaptive", "work-conserving", {"a": (0.15, 0.096), "b": (0.4, 0.12)}),  # crossover's pace, 1.2x compute
    ]
    run = 0
    for mode, policy, jobs in runs:
        for slot, (name, (seconds, compute)) in enumerate(jobs.items()):
            run += 1
            db.execute("INSERT INTO runs VALUES (?, 'e1', 0, ?, ?, ?, ?, 'finished')", (run, slot, name, mode, policy))
            for step, (ended, _) in enumerate(_points(seconds, 20)):
                db.execute("INSERT INTO iteration_metrics VALUES (?, ?, ?, ?, ?)", (run, step, ended, seconds, compute))
    db.execute("INSERT INTO sharing_segments VALUES (7, 1, 'probe', 'crossover', '[2.0, 4.0]')")
    db.execute("INSERT INTO sharing_segments VALUES (7, 2, 'settled', 'crossover', '[4.0, 19.0]')")  # not a probe
    db.commit()


def test_a_store_reads_its_fixed_runs_replayed_and_adaptives_windows_against_the_columns(tmp_path, capsys):
    _store(tmp_path / "x.db")
    assert load_bench("window_replay").main(["--db", str(tmp_path / "x.db")]) == 0
    out = capsys.readouterr().out
    assert "on the fixed runs of 1 rows" in out
    assert "crossover:work-conserving  every window 1.000 (1); the first 1.000 (1)" in out
    assert "crossover                  1.000 (1)" in out  # adaptive's window at crossover's pace
    assert "at the same steps: 1.200 (standard error 0.000, 2)" in out
    assert "row e1" not in out
    assert load_bench("window_replay").main(["--db", str(tmp_path / "x.db"), "--rows"]) == 0
    assert "row e1 (sequential,concurrent,crossover/work-conserving,adaptive/work-conserving): windows over their column, crossover 1.000 (1); " \
        "concurrent -; compute 1.200 (standard error 0.000, 2)" in capsys.readouterr().out


def test_a_missing_store_or_a_bad_length_is_refused_with_exit_2(tmp_path, capsys):
    bench = load_bench("window_replay")
    assert bench.main(["--db", str(tmp_path / "none.db")]) == 2
    (tmp_path / "some.db").touch()
    assert bench.main(["--db", str(tmp_path / "some.db"), "--length", "0"]) == 2
    assert "no such store" in capsys.readouterr().err
