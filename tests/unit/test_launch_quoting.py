"""What a user controls (script arguments, paths, settings' names and values) reaches horovodrun's shell lines, ssh's
remote command and Slurm's batch script either exactly as given, or is refused before anything starts: the command
lines are built here and read back by a real shell, never matched by eye."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from xover.errors import XoverError

# what a shell would run, or read as something else, if it were not quoted
HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "a b",
    "'\"",
    "x\ny",
    "-np",
    "--help",
    "%j",
    "\\",
    "\udcff",  # a byte that is not UTF-8, as Python decodes it from argv
    "L" * 5000,
]


def _shell_words(line: str, cwd) -> list[str]:
    """What bash makes of `line` followed by the arguments a Python program gets: its argv, as bytes in hex."""
    show = "import json, os, sys; print(json.dumps([os.fsencode(a).hex() for a in sys.argv[1:]]))"
    done = subprocess.run(["bash", "-c", f"{line} {shlex.quote(sys.executable)} -c {shlex.quote(show)}"],
                          capture_output=True, cwd=cwd, timeout=30)
    assert done.returncode == 0, done.stderr
    return [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in json.loads(done.stdout)]


# ------------------------------------------------------------------------------ horovodrun's shell lines


def _horovod_rank_line(env: dict[str, str], command: list[str]) -> str:
    """The shell line horovodrun 0.28.1 runs for a rank (on this machine, through a shell, as over ssh)."""
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.gloo_run import _slot_info_to_command_fn, get_run_command

    run_command = get_run_command(command, "127.0.0.1", ["lo"], 1234)
    slot = SlotInfo(hostname="localhost", rank=0, local_rank=0, cross_rank=0, size=1, local_size=1, cross_size=1)
    return _slot_info_to_command_fn(run_command, env)(slot)


def test_a_script_argument_reaches_a_horovod_rank_as_given(tmp_path):
    show = "import json, os, sys; print(json.dumps([os.fsencode(a).hex() for a in sys.argv[1:]]))"
    line = _horovod_rank_line({}, [sys.executable, "-c", show, *HOSTILE])
    done = subprocess.run(["bash", "-c", line], capture_output=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    got = [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in json.loads(done.stdout)]
    assert got == HOSTILE
    assert not (tmp_path / "pwned").exists()


def test_a_setting_horovodrun_forwards_reaches_its_ranks_as_given(tmp_path):
    from xover.run.external.horovodrun import horovodrun_env

    value = "$(touch pwned) `touch pwned` ; '\" a\nb %j \\"
    env = horovodrun_env({"XOVER_RESULTS": value, "PATH": "/usr/bin:/bin"})
    show = "import os; print(os.environ['XOVER_RESULTS'], end='')"
    done = subprocess.run(["bash", "-c", _horovod_rank_line(env, [sys.executable, "-c", show])],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == value
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["XOVER_X$(touch pwned)", "XOVER_X`touch pwned`", "OMP_A;touch pwned;B",
                                  "LC_X Y", "XOVER_\n", "PYTHON-X"])
def test_a_variable_horovodrun_would_forward_under_a_name_no_shell_can_set_is_refused(tmp_path, name):
    """Before: horovodrun wrote the name unquoted into each rank's shell line (`env ... XOVER_X$(touch pwned)='1'
    python ...`), and the shell ran what it held; a real `xover run` of a Horovod job made the file."""
    from xover.run.external.horovodrun import check_forwarded_names, horovodrun_env

    env = {name: "1", "PATH": "/usr/bin:/bin"}
    with pytest.raises(XoverError, match="not a name a shell can set") as refused:
        horovodrun_env(env)
    assert repr(name) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(XoverError):
        check_forwarded_names(env)
    check_forwarded_names({"MY$(X)": "1", "XOVER_OK_1": "x", "_UNDERSCORE": "y"})  # never forwarded, or a name
