"""Hostile input on the command line and in the environment of `xover run` / `profile` / `train`: refused with
one line naming the flag, file or variable and what to do, exit code 2, before anything is recorded or run
(tests/unit/test_launch_quoting.py: what is passed through reaches the launchers exactly)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from xover.cli import app

runner = CliRunner()


def _one_clear_line(result, *must_contain: str) -> str:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("error:"), text
    for needle in must_contain:
        assert needle in text, (needle, text)
    return text


def _nothing_recorded(root: Path) -> None:
    assert not (root / "results").exists()


def test_a_setting_named_with_a_command_is_refused_before_horovodrun_runs_it(isolated_results, monkeypatch):
    """Before: `env 'XOVER_X$(touch pwned)=1' xover run ...` of a Horovod job ran `touch pwned` in every rank's
    shell (horovodrun quotes a forwarded variable's value, not its name)."""
    pwned = isolated_results / "pwned"
    monkeypatch.setenv(f"XOVER_X$(touch {pwned})", "1")
    result = runner.invoke(app, ["run", "--group", "mlp-digits", "--mode", "sequential", "--iterations", "2"])
    _one_clear_line(result, "XOVER_X$(touch", "not a name a shell can set", "env -u")
    assert not pwned.exists()
    _nothing_recorded(isolated_results)


def test_horovod_on_another_host_from_a_folder_a_shell_would_misread_is_one_clear_line(isolated_results,
                                                                                        monkeypatch):
    """Before: the run went on to reach h1, whose shell would have run the folder's `$(...)` (horovodrun's
    `cd FOLDER ; ...`, unquoted)."""
    folder = isolated_results / "runs $(touch pwned)"
    folder.mkdir()
    monkeypatch.chdir(folder)
    result = runner.invoke(app, ["run", "--group", "mlp-digits", "-H", "h1:2", "--mode", "sequential"])
    _one_clear_line(result, "runs Horovod ranks on h1", "run xover from a folder")
    _nothing_recorded(isolated_results)
