"""Hostile input on the command line and in the environment of `xover run` / `profile` / `train`: refused with
one line naming the flag, file or variable and what to do, exit code 2, before anything is recorded or run
(tests/unit/test_launch_quoting.py: what is passed through reaches the launchers exactly)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
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


HOROVOD_SCRIPT = "import horovod.torch as hvd\nhvd.init()\n"


def _script(folder: Path, name: str) -> str:
    path = os.path.join(os.fsencode(folder), os.fsencode(name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        out.write(HOROVOD_SCRIPT)
    return os.fsdecode(path)


@pytest.mark.parametrize("command", ["run", "profile", "plan"])
@pytest.mark.parametrize("kind, words", [("folder", "a folder, not a file"), ("fifo", "not a regular file"),
                                         ("dangling", "file not found (a symbolic link to nothing)"), ("missing", "file not found")])
def test_a_script_that_is_no_regular_file_says_what_it_is(isolated_results, command, kind, words):
    """Before: a folder and a pipe were each 'file not found'."""
    path = isolated_results / "train.py"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(isolated_results / "gone.py")
    _one_clear_line(runner.invoke(app, [command, "--script", str(path)]), f"--script {path}: {words}")
    _nothing_recorded(isolated_results)


@pytest.mark.parametrize("command", ["run", "profile", "plan"])
@pytest.mark.parametrize("name", ["my train.py", "$(touch pwned).py", "-np.py", "...py", "new\nline.py", "é.py"])
def test_a_script_whose_file_name_cannot_name_its_job_is_refused(isolated_results, command, name):
    """Before: `xover run --script 'my train.py'` ran a job named 'my train', and `xover plan` wrote a plan of it
    that `xover run` then refused (a plan's job names are a job file's); a name with a newline split the tables."""
    script = _script(isolated_results / "scripts", name)
    text = _one_clear_line(runner.invoke(app, [command, "--script", script, "--engine", "horovod"]),
                           "its file name makes the job's name", "rename the file, or give it a job file")
    assert text.startswith(f"error: --script {script.replace(chr(10), chr(92) + 'n')}:")
    _nothing_recorded(isolated_results)


@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_script_whose_path_is_not_utf8_is_refused_before_anything_is_recorded(isolated_results, monkeypatch,
                                                                                 command):
    """Before: `xover run --script $'/data/\\xff/train.py'` started the experiment and ended in a traceback (the store
    could not keep the path: UnicodeEncodeError), exit code 1."""
    script = _script(isolated_results / os.fsdecode(b"runs-\xff"), "train.py")
    _one_clear_line(runner.invoke(app, [command, "--script", script]), "is not valid UTF-8", "runs-\\xff",
                    "rename the file or its folder")
    monkeypatch.chdir(os.path.dirname(script))  # the same path, given relative to a folder that is not UTF-8
    _one_clear_line(runner.invoke(app, [command, "--script", "train.py"]), "--script train.py:", "runs-\\xff/train.py",
                    "not valid UTF-8")
    assert not (isolated_results / "results").exists() and not (isolated_results / "xover.db").exists()


def test_a_job_file_whose_script_path_is_not_utf8_names_its_field(isolated_results):
    """A job file's `script` is found next to it: a folder that is not UTF-8 is refused there too."""
    script = _script(isolated_results / os.fsdecode(b"runs-\xff"), "train.py")
    job_file = Path(os.path.dirname(script)) / "job.toml"
    job_file.write_text('script = "train.py"\nnp = 1\n')
    result = runner.invoke(app, ["run", "--group", str(job_file)])
    _one_clear_line(result, "field 'script'", "runs-\\xff", "not valid UTF-8", "rename the file or its folder")
    _nothing_recorded(isolated_results)


@pytest.mark.parametrize("variable", ["XOVER_RESULTS", "XOVER_DB", "XOVER_LEASE_DIR"])
def test_a_setting_that_is_not_utf8_is_one_clear_line_without_its_value(isolated_results, monkeypatch, variable):
    """Before: XOVER_RESULTS=$'/data/\\xff' started the run and ended in a traceback (UnicodeEncodeError in the
    store), exit code 1. The value is never shown: XOVER_DB's may hold a password."""
    value = os.fsdecode(os.fsencode(isolated_results) + b"/s3cret-\xff")
    monkeypatch.setenv(variable, value)
    text = _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "--mode", "sequential"]),
                           f"{variable}: its value is not valid UTF-8", "give it in UTF-8")
    assert "s3cret" not in text
    assert not os.path.exists(os.fsencode(value))
    _nothing_recorded(isolated_results)


@pytest.mark.parametrize("variable", ["XOVER_RESULTS", "XOVER_LEASE_DIR"])
def test_a_folder_setting_with_a_newline_is_refused_before_anything_is_recorded(isolated_results, monkeypatch,
                                                                                variable):
    """Before: XOVER_RESULTS=$'/tmp/a\nb' ran, and its summary's "logs:" line broke in two."""
    monkeypatch.setenv(variable, f"{isolated_results}/a\nb")
    _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "--mode", "sequential"]),
                    f"{variable}: its value holds a control character (character", "'\\n'", "give a folder whose")
    assert not (isolated_results / "a\nb").exists()
    _nothing_recorded(isolated_results)


@pytest.mark.parametrize("args, flag", [
    (["run", "--group", "mlp-digits", "--engine", "tor\nch"], "--engine tor\\nch: choose"),
    (["run", "--group", "mlp-digits", "--mode", "cross\nover"], "--mode cross\\nover: choose"),
    (["run", "--group", "mlp-digits", "--policy", "x\ny"], "--policy x\\ny: choose"),
    (["run", "--group", "mlp-digits", "--launcher", "sl\nurm"], "--launcher sl\\nurm: choose"),
    (["train", "mlp\ndigits"], "mlp\\ndigits: no recipe file"),
    (["run", "--group", "x\udcff.toml"], "x\\xff.toml: recipe file not found"),
])
def test_a_flags_value_with_a_newline_is_named_on_one_line(isolated_results, args, flag):
    """Before: the value was printed as given, its newline splitting the error over two lines."""
    _one_clear_line(runner.invoke(app, args), flag)
    _nothing_recorded(isolated_results)
