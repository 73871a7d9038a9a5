"""What a terminal is sent: text to show, never a control sequence to act on (console.shown)."""

import io

import pytest
from rich.console import Console

from xover import console


def test_control_characters_and_direction_overrides_are_written_as_escapes():
    assert console.shown("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert console.shown("t\x1b]0;title\x07") == "t\\x1b]0;title\\x07"
    assert console.shown("x\u202ey\x9b") == "x\\u202ey\\x9b"
    assert console.shown("two\nlines\tand tabs, caf\u00e9, \u4e2d") == "two\nlines\tand tabs, caf\u00e9, \u4e2d"


def test_errors_and_tables_show_what_they_are_given_escaped(capsys):
    console.print_error("cannot read a\x1b[31mb")
    console.print_table("t\x1b[2J", [("job", "job")], [{"job": "j\x1b[5m"}])
    captured = capsys.readouterr()
    assert "\x1b" not in captured.err + captured.out
    assert "a\\x1b[31mb" in captured.err and "t\\x1b[2J" in captured.out and "j\\x1b[5m" in captured.out


def test_work_without_figures_of_its_own_shows_a_spinner_on_a_terminal_and_nothing_in_a_log(monkeypatch):
    """A plan of 300 jobs was silent for 40 s, doctor for 10-18 s, a first write to MLflow for 25 s, on a
    terminal too (a probe session, 2026-12-06): a spinner with what is being done, there only."""
    import io

    from rich.console import Console

    from xover import console as console_module

    for terminal in (True, False):
        out = io.StringIO()
        monkeypatch.setattr(console_module, "errors", Console(file=out, force_terminal=terminal, width=80))
        with console_module.working("planning [300 jobs]"):
            pass
        assert ("planning [300 jobs]" in out.getvalue()) is terminal, out.getvalue()

# the summary of `xover simulate --policy all`: at 80 columns rich cut it to "tire…", "xove…", "2.64…", "gro…"
POLICIES = ["fifo", "srtf", "srsf", "tiresias", "xover", "xover-las"]
SUMMARY = [("policy", "policy"), ("done", "done"), ("avg JCT s", "avg"), ("median JCT s", "median"),
           ("p99 JCT s", "p99"), ("makespan s", "makespan"), ("utilisation", "utilisation"),
           ("avg queueing s", "queueing"), ("grouped", "grouped"), ("replay s", "replay")]
SUMMARY_ROWS = [{"policy": name, "done": 3, "avg": 2.645 + index, "median": 10.125 * (index + 1), "p99": 1234.5,
                 "makespan": 98765.25, "utilisation": 0.7, "queueing": 0.0, "grouped": 0.333, "replay": 12.5}
                for index, name in enumerate(POLICIES)]


def _drawn(width: int, columns=SUMMARY, rows=SUMMARY_ROWS) -> str:
    """What print_table draws on a terminal `width` columns wide."""
    screen = Console(width=width, record=True, file=io.StringIO(), emoji=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(console, "console", screen)
        console.print_table("xover simulate", columns, rows)
    return screen.export_text()


@pytest.mark.parametrize("width", [200, 100, 80, 60, 40])
def test_a_table_at_any_width_shows_every_name_number_and_header_whole(width):
    drawn = _drawn(width)
    assert "…" not in drawn
    assert max(len(line.rstrip()) for line in drawn.splitlines()) <= width
    words = set(drawn.split())
    for row in SUMMARY_ROWS:
        for _, key in SUMMARY:
            assert console.fmt(row[key]) in words, (key, row[key], drawn)  # whole, not "2.64" and "5" apart
    for header, _ in SUMMARY:
        assert set(header.split()) <= words, (header, drawn)


def test_a_table_that_fits_is_drawn_as_rich_draws_it():
    wide = _drawn(200)
    assert wide.splitlines()[1].startswith("┏") and "│ xover-las │" in wide
    assert "─" in _drawn(80) and "│" not in _drawn(80)  # borders given up before any value is cut
    assert "policy" in _drawn(40).splitlines()[2]  # too narrow for the columns side by side: a row's lines


def test_a_long_text_cell_wraps_onto_more_lines_whole():
    why = "crossover 1.35 (simulated), concurrent 1.35 (simulated): within the model's error " * 3
    path = "/data/traces/" + "x" * 60 + ".csv"
    drawn = _drawn(80, [("group", "group"), ("why", "why"), ("trace", "trace")],
                   [{"group": 12345, "why": why.strip(), "trace": path}])
    assert "…" not in drawn and "12345" in drawn.split()
    body = [line.split("│")[1:-1] for line in drawn.splitlines() if line.startswith("│")]
    column = ["".join("".join(cells[index].split()) for cells in body) for index in range(3)]
    assert column == ["12345", "".join(why.split()), path]


def test_json_is_strict_a_number_that_is_not_finite_is_null():
    """A diverged job's final loss (NaN) was written as a bare NaN, which jq and a browser refuse for the whole
    text; every JSON xover writes goes through json_text."""
    import json
    import math

    from xover.console import json_text

    text = json_text({"final_loss": math.nan, "diff": [math.inf, -math.inf, 0.5], "nested": {"x": (1, math.nan)}})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"final_loss": None, "diff": [None, None, 0.5], "nested": {"x": [1, None]}}


class _Stream:
    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(("columns", "terminal", "width"),
                         [("0", True, 80), ("00", True, 80), ("", True, None), ("120", True, None), ("abc", True, None),
                          ("0", False, 200)])
def test_columns_of_0_on_a_terminal_draws_at_80_not_nothing(monkeypatch, columns, terminal, width):
    """COLUMNS=0 on a terminal: rich drew every table and line at width 0, nothing at all, exit 0."""
    from xover.console import _width

    monkeypatch.setenv("COLUMNS", columns)
    assert _width(_Stream(terminal)) == width
    assert _width(None) == 200  # a stdout the shell closed


def test_a_plans_headline_says_what_of_its_time_one_after_another_is_launches():
    """A plan of short jobs led with 1.53x beside a group's gain of 1.24: one after another counts each job's launch,
    shared a group's once. Where launches are a tenth of that time or more, the headline says so."""
    from types import SimpleNamespace

    from xover.views import _launches_counted

    def plan(launch_ms, train_ms):
        jobs = [SimpleNamespace(startup_ms=launch_ms), SimpleNamespace(startup_ms=launch_ms)]
        return SimpleNamespace(jobs=jobs, sequential_makespan_ms=2 * (launch_ms + train_ms))

    assert _launches_counted(plan(3000, 2750)) == (
        "; 6.0 s of the 11.5 s are the jobs' launches, which a group's jobs make side by side: longer jobs gain "
        "nearer the gain column"
    )
    assert _launches_counted(plan(3000, 60_000)) == ""  # a twentieth: said nothing of
