"""What a terminal is sent: text to show, never a control sequence to act on (console.shown)."""

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
