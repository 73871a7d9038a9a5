"""An option that takes one value, given twice. Before: click kept the last without a word, so
`xover plan --profiles A.csv --profiles B.csv` planned B alone, `xover --db X --db Y report` read Y, and
`xover run --group a b --group c` ran one group of three. Now: one line naming the option and its values, exit 2,
before anything is read or written (xover/cli_common.py, _refusing_repeats); options meant to repeat still do."""

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xover.cli import app

ROOT = Path(__file__).resolve().parents[2]


def _profiles(path: Path) -> Path:
    path.write_text("name,devices,compute_ms,comm_ms,memory_gb\njob0,1,10,5,1\njob1,1,11,6,1\n")
    return path


def _refused(args: list[str]) -> str:
    done = CliRunner().invoke(app, [str(arg) for arg in args])
    assert done.exit_code == 2, done.output
    assert isinstance(done.exception, SystemExit), done.exception  # typer.Exit: no traceback
    lines = done.output.strip().splitlines()
    assert len(lines) == 1, done.output
    return lines[0]


def test_a_repeated_value_is_refused_naming_both_values_and_nothing_is_written(tmp_path):
    first, second, plan = _profiles(tmp_path / "A.csv"), _profiles(tmp_path / "B.csv"), tmp_path / "p.json"
    line = _refused(
        ["--db", tmp_path / "x.db", "plan", "--profiles", first, "--profiles", second, "--devices", "1", "--out", plan]
    )
    assert line == f"error: --profiles was given twice ({first}, {second}); it takes one value: give it once"
    assert not plan.exists() and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--db", "a.db", "--db", "b.db", "report", "all"], "--db was given twice (a.db, b.db)"),
        (["--db", "a.db", "--db", "a.db", "report", "all"], "--db was given twice (a.db, a.db)"),  # equal values too
        (
            ["plan", "--profiles", "A.csv", "--out", "p.json", "--out", "q.json"],
            "--out was given twice (p.json, q.json)",
        ),
        (
            ["run", "--script", "a.py", "--mode", "crossover", "--mode", "concurrent"],
            "--mode was given twice (crossover, concurrent)",
        ),
        (
            ["run", "--script", "a.py", "-H", "h1:1", "--hosts", "h2:1"],
            "--hosts was given twice (h1:1, h2:1)",
        ),  # either name
        (["report", "all", "--format", "csv", "--format", "json"], "--format was given twice (csv, json)"),
        (
            ["simulate", "t.csv", "--profiles", "A.csv", "--profiles", "B.csv"],
            "--profiles was given twice (A.csv, B.csv)",
        ),
        (
            ["run", "--group", "a", "b", "--group", "c"],
            "--group was given twice; give it once",
        ),  # a flag: one group a run
        (["profile", "a", "--corun", "--no-corun"], "--corun and --no-corun were both given"),
        (["cluster", "status", "--json", "--json"], "--json was given twice; give it once"),
        (
            ["--db", "postgresql://u:secret@h/x", "--db", "b.db", "report"],
            "--db was given twice (postgresql://u:***@h/x",
        ),
    ],
)
def test_every_command_refuses_a_single_valued_option_given_twice(args, said):
    line = _refused(args)
    assert line.startswith("error: ") and said in line, line
    assert "secret" not in line


def test_options_meant_to_repeat_still_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["--db", str(tmp_path / "x.db"), "run", "--script", "one.py", "--script", "two.py"])
    assert done.exit_code == 2 and "--script one.py: file not found" in done.output, done.output  # read on, past both
    assert "given twice" not in done.output
    after = CliRunner().invoke(
        app, ["--db", str(tmp_path / "x.db"), "run", "--script", "one.py", "--", "--lr", "1", "--lr", "2"]
    )
    assert "--script one.py: file not found" in after.output, after.output  # the script's own words, after --
    verbose = CliRunner().invoke(app, ["plan", "-h", "-h"])  # help, asked twice, is still help
    assert verbose.exit_code == 0 and "Usage" in verbose.output


def test_a_store_named_by_xover_db_and_by_db_once_is_not_a_repeat(tmp_path, monkeypatch):
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "env.db"))
    done = CliRunner().invoke(app, ["--db", str(tmp_path / "given.db"), "report", "all"])
    assert "given twice" not in done.output and "given.db" in done.output, done.output


def test_python_m_xover_refuses_a_repeated_global_option_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "xover", "--db", tmp_path / "a.db", "--db", tmp_path / "b.db", "report", "all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip() == f"error: --db was given twice ({tmp_path / 'a.db'}, {tmp_path / 'b.db'}); it takes "
        "one value: give it once"
    )
