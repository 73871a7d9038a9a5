"""The CLI's contract: help, version, clear one-line errors with exit 2 and no traceback."""

import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from xover import __version__
from xover.cli import app

runner = CliRunner()


def test_version_and_help():
    assert runner.invoke(app, ["--version"]).output.strip() == f"xover {__version__}"
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "train", "run", "profile", "plan", "report"):
        assert command in result.output
        assert runner.invoke(app, [command, "--help"]).exit_code == 0


def test_typo_in_field_name_is_one_line_exit_2(tmp_path):
    recipe = tmp_path / "typo.toml"
    recipe.write_text('name="x"\nmodel="mlp"\ndataset="digits"\nbatch_sise=8\noptimizer="sgd"\nlr=0.1\n'
                      'np=2\nseed=1\niterations=5\n')
    result = subprocess.run([sys.executable, "-m", "xover", "train", str(recipe)], capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "batch_sise" in lines[0] and "did you mean 'batch_size'" in lines[0] and str(recipe) in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_bad_flags_exit_2():
    for args in (["train", "mlp-digits", "--bandwidth", "fast"], ["train", "mlp-digits", "-H", "host"],
                 ["train", "mlp-digits", "--np", "64"], ["train", "nothing-here"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "error:" in result.output


def test_doctor_json():
    result = subprocess.run([sys.executable, "-m", "xover", "doctor", "--json"], capture_output=True, text=True)
    report = json.loads(result.stdout)
    names = {c["name"]: c for c in report["checks"]}
    assert {"python", "torch", "horovod", "gpus", "bandwidth emulation", "database"} <= set(names)
    assert result.returncode == (0 if report["ok"] else 1)
    assert names["horovod"]["ok"] and "Gloo: yes" in names["horovod"]["detail"]
    assert names["database"]["ok"]


def test_tables_print_a_tiny_negative_number_as_zero_not_minus_zero():
    from xover.console import fmt

    assert fmt(-0.001) == "0.00" and fmt(-0.0) == "0.00" and fmt(-0.4, 0) == "0"
    assert fmt(-0.01) == "-0.01" and fmt(-100.0, 0) == "-100" and fmt(None) == "-"


FAILS_AFTER_TWELVE_STEPS = """
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
sys.exit(3)
"""


def test_train_gives_a_run_that_failed_no_throughput_as_the_report_does(isolated_results, tmp_path):
    """`xover train --json` gave a failed run its whole-run samples/s, a speed and a slowdown of 1.0, while
    `xover report` of the same experiment has none: a run that did not finish is no measurement. Its
    iteration times stay."""
    (tmp_path / "fails.py").write_text(FAILS_AFTER_TWELVE_STEPS)
    job = tmp_path / "fails.toml"
    job.write_text('name = "fails"\nscript = "fails.py"\nnp = 1\nengine = "torch"\n')
    result = subprocess.run([sys.executable, "-m", "xover", "train", str(job), "--json"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    [trained] = json.loads(result.stdout)["jobs"]
    assert trained["status"] == "failed" and trained["iterations"] == 12
    assert (trained["samples_per_s"], trained["speed"], trained["slowdown"], trained["samples_per_s_shared"]) == (
        None, None, None, None)
    assert trained["iteration_ms"] > 0
    report = subprocess.run([sys.executable, "-m", "xover", "report", "--format", "json"], capture_output=True,
                            text=True, timeout=300)
    [reported] = json.loads(report.stdout)["jobs"]
    assert {key: reported[key] for key in trained} == trained


def _commands(command, path=()):
    """Every command of the command line, with the words that reach it: (path, click command)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_help_shows_a_value_after_a_flag():
    """typer's rich help gives each option its type's placeholder, a flag's too (`--json <bool>`): a flag takes
    no value, so no command's help may show one after it; an option that takes a value still shows its type, an
    option given once per value its value's type."""
    import typer

    commands = list(_commands(typer.main.get_command(app)))
    assert {"run", "plan", "profile", "cluster", "cluster up"} <= {" ".join(path) for path, _ in commands}
    flags = values = repeated = 0
    for path, command in commands:
        help_text = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "250"}).output
        rows = {}  # an option's names -> the word after them in its row
        for line in help_text.splitlines():
            words = line.strip("│ ").split()
            count = next((i for i, word in enumerate(words) if not word.startswith("-")), len(words))
            if count:
                rows[frozenset(words[:count])] = words[count] if count < len(words) else ""
        context = command.make_context("xover", ["--help"], resilient_parsing=True)
        for param in [*command.params, command.get_help_option(context)]:
            if getattr(param, "param_type_name", None) != "option" or param.hidden:
                continue
            after = rows[frozenset(param.opts + param.secondary_opts)]
            if param.is_flag or param.count:
                flags += 1
                assert not after.startswith("<"), (path, param.opts, after)
            else:
                values += 1
                assert after.startswith("<"), (path, param.opts, after)
                # given once per value (`--script a.py --script b.py`): one value's placeholder, not a list's
                assert not after.startswith("<list"), (path, param.opts, after)
                repeated += param.multiple
    assert flags >= 20 and values >= 20 and repeated >= 3, (flags, values, repeated)


def test_doctor_fails_on_each_setting_every_run_would_refuse_and_names_a_variable_it_never_reads(tmp_path):
    # doctor said "jobs can run here", and every run then refused the setting; a misspelt setting was ignored
    # without a word, by doctor and by every run. One doctor for all of them: it reads each variable alone.
    afile = tmp_path / "afile"
    afile.write_text("")
    refused = {
        "XOVER_THREADS_PER_RANK": ("0", "XOVER_THREADS_PER_RANK='0': give a whole number from 1 to 4096"),
        "XOVER_CPU_ONLY": ("yes", "XOVER_CPU_ONLY='yes': expected 1 (on) or 0 (off)"),
        "XOVER_METRIC_SINKS": ("progress,foo", "XOVER_METRIC_SINKS: no metric sink named foo (there are: "),
        "XOVER_LEASE_DIR": (str(afile), f"XOVER_LEASE_DIR: {afile} is a file, not a folder"),
        "XOVER_RESULTS": (str(afile), f"the results folder {afile} is not a folder"),
    }
    env = {**os.environ, "XOVER_DB": str(tmp_path / "x.db"), "XOVER_THREAD_PER_RANK": "2", "XOVER_FOO": "1",
           **{variable: value for variable, (value, _) in refused.items()}}
    result = subprocess.run([sys.executable, "-m", "xover", "doctor", "--json"], capture_output=True, text=True,
                            env=env)
    report = json.loads(result.stdout)
    checks = {check["name"]: check for check in report["checks"]}
    assert result.returncode == 1 and not report["ok"] and not checks["settings"]["ok"], checks["settings"]
    problems = checks["settings"]["detail"].split("; ")
    for variable, (_, said) in refused.items():
        assert sum(problem.startswith(said) for problem in problems) == 1, (variable, problems)
    unknown = checks["unknown settings"]
    assert not unknown["ok"] and not unknown["required"], unknown
    assert unknown["detail"] == ("not read by xover: XOVER_FOO; XOVER_THREAD_PER_RANK (did you mean "
                                 "'XOVER_THREADS_PER_RANK'?)")


@pytest.mark.parametrize(("url", "said"), [
    ("sqlite://", "sqlite://: a database in memory keeps nothing past this command"),
    ("postgres://u:s3cret@db.invalid/x", "postgres://u:***@db.invalid/x: write postgresql://"),
])
def test_doctor_json_fails_the_database_check_on_a_store_url_no_command_takes(tmp_path, url, said):
    # `XOVER_DB=sqlite:// xover doctor --json` printed an error line and no JSON: a tool reading it got nothing
    env = {**os.environ, "XOVER_DB": url}
    result = subprocess.run([sys.executable, "-m", "xover", "doctor", "--json"], capture_output=True, text=True,
                            env=env)
    report = json.loads(result.stdout)
    [check] = [check for check in report["checks"] if check["name"] == "database"]
    assert result.returncode == 1 and not report["ok"] and not check["ok"], check
    assert check["detail"].startswith(said) and "s3cret" not in result.stdout + result.stderr, check


def test_doctor_names_every_bad_setting_and_those_set_to_nothing(tmp_path):
    # two bad settings: doctor named the first, and the second only once the first was fixed; XOVER_RESULTS=
    # (a typo's $EMPTY) was "read" and the results went to ./results without a word
    env = {**os.environ, "XOVER_DB": str(tmp_path / "x.db"), "XOVER_TURN_HEARTBEAT": "-1",
           "XOVER_COMM_THREADS": "abc", "XOVER_METRIC_SINKS": "nosuch", "XOVER_RESULTS": ""}
    result = subprocess.run([sys.executable, "-m", "xover", "doctor", "--json"], capture_output=True, text=True,
                            env=env)
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert result.returncode == 1 and not checks["settings"]["ok"], checks["settings"]
    assert checks["settings"]["detail"].startswith(
        "XOVER_COMM_THREADS='abc': expected one of batch, normal, always; XOVER_TURN_HEARTBEAT='-1': expected "
        "seconds, more than 0 and at most 60; XOVER_METRIC_SINKS: no metric sink named nosuch (there are: ")
    empty = checks["empty settings"]
    assert not empty["ok"] and not empty["required"], empty
    assert empty["detail"] == "set but empty, so read as unset (their defaults): XOVER_RESULTS"


def test_dash_h_is_help_on_every_command():
    """`xover run -h` was refused (`No such option: -h`): -h is --help everywhere, the group's too."""
    import typer

    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) > 8
    for path, _ in commands:
        short = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "120"})
        long = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert short.exit_code == 0 and short.output == long.output, (path, short.output)
        assert "Usage:" in short.output


def test_no_help_shows_a_list_type():
    """An argument that takes several values (`xover run [targets]...`, `profile`, `plan`) showed `<list[str]>`
    after its name, as typer types it; its name ends in `...` already, and each value is one `<str>`."""
    import typer

    shown = 0
    for path, _ in _commands(typer.main.get_command(app)):
        help_text = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "250"}).output
        assert "<list" not in help_text, (path, [line for line in help_text.splitlines() if "<list" in line])
        shown += bool(re.search(r"(recipes|targets)\.\.\.\s+<str>", help_text))
    assert shown >= 3
