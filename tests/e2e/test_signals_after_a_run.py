"""SIGTERM (or Ctrl-C) while a command prints what it stored: one line saying what was kept, exit 130, the
experiment whole in the store. It ended `xover run` with exit 143, not a word, and its table cut short (a
review's trial: the signal 0.3-0.5 s before the run's end)."""

import json
import subprocess
import sys

import pytest
from conftest import signalled_xover


def _latest() -> dict:
    result = subprocess.run([sys.executable, "-m", "xover", "report", "latest", "--format", "json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# one rank a job (--np 1): what is tested is the command's last words as it shows what it stored
@pytest.mark.parametrize(("where", "args"), [
    ("xover.cli.show_run", ["run", "--group", "mlp-digits", "mlp-digits", "--np", "1", "--iterations", "3", "--mode",
                            "concurrent"]),
    ("xover.cli.show_train", ["train", "mlp-digits", "--np", "1", "--iterations", "3"]),
], ids=["run", "train"])
def test_sigterm_as_a_run_is_shown_says_it_was_stored_whole(isolated_results, where, args):
    result = signalled_xover(where, *args, timeout=600)
    assert result.returncode == 130, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    said = result.stderr.strip().splitlines()[-1]
    assert said.startswith("interrupted: the experiment was stored whole, as "), result.stderr[-2000:]
    experiment = said.split(", as ", 1)[1].split(" ", 1)[0]
    assert said.endswith(f"(xover report {experiment} shows it); its table was cut short")
    shown = _latest()
    assert shown["experiment"]["id"] == experiment and shown["experiment"]["status"] == "finished", shown["experiment"]
    assert shown["jobs"] and all(job["status"] == "finished" and job["iterations"] == 3 for job in shown["jobs"])


def test_sigterm_as_profiles_are_shown_says_they_were_stored(isolated_results):
    args = ["profile", "mlp-digits", "--np", "1", "--iterations", "5", "--warmup", "1", "--no-corun", "--no-stretch"]
    result = signalled_xover("xover.cli.show_profiles", *args, timeout=600)
    assert result.returncode == 130, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.strip().splitlines()[-1] == ("interrupted: the profiles were stored whole (the same command "
                                                      "shows them again, reusing them); its table was cut short")
    shown = subprocess.run([sys.executable, "-m", "xover", *args, "--json"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert [(p["name"], p["reused"]) for p in json.loads(shown.stdout)] == [("mlp-digits", True)]
