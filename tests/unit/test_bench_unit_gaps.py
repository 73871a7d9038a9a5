"""bench/unit_gaps.py: the time between two units on the same devices, read from a store's runs."""

import sqlite3

from conftest import load_bench


def test_each_boundary_is_one_units_last_end_to_the_next_ones_first_start():
    gaps = load_bench("unit_gaps")
    Run = gaps.Run
    runs = [
        Run(1, 0, "sequential", None, 0.0, 10.0),
        Run(2, 0, "sequential", None, 11.5, 20.0),
        Run(3, 0, "concurrent", None, 22.0, 30.0),  # a group's unit: both of its runs
        Run(4, 0, "concurrent", None, 22.1, 31.0),
        Run(5, 0, "crossover", "work-conserving", 34.0, 40.0),
        Run(6, 0, "crossover", "work-conserving", 34.2, 41.0),
        Run(7, 1, "concurrent", None, 35.0, 45.0),  # another group side by side: no boundary
    ]
    assert [(g.before, g.after, round(g.seconds, 2)) for g in gaps.gaps_of(runs)] == [
        ("sequential", "sequential", 1.5),
        ("sequential", "concurrent", 2.0),
        ("concurrent", "crossover", 3.0),
    ]


def test_it_reads_the_newest_experiment_of_a_store(tmp_path, capsys):
    db = tmp_path / "xover.db"
    with sqlite3.connect(db) as made:
        made.execute("CREATE TABLE experiments (id TEXT, created_at TEXT)")
        made.execute("CREATE TABLE runs (id INTEGER, experiment_id TEXT, group_index INTEGER, mode TEXT, policy TEXT, "
                     "started_at TEXT, ended_at TEXT)")
        made.execute("INSERT INTO experiments VALUES ('old', '2026-11-30 03:00:00'), ('new', '2026-11-30 04:00:00')")
        made.executemany("INSERT INTO runs VALUES (?, ?, 0, 'sequential', NULL, ?, ?)", [
            (1, "new", "2026-11-30 04:00:00", "2026-11-30 04:00:10"),
            (2, "new", "2026-11-30 04:00:11.25", "2026-11-30 04:00:20"),
            (3, "old", "2026-11-30 03:00:00", "2026-11-30 03:00:10"),
        ])
    assert load_bench("unit_gaps").main(["--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "experiment new" in out and "sequential -> sequential    1.25" in out
    assert load_bench("unit_gaps").main(["--db", str(tmp_path / "none.db")]) == 2
