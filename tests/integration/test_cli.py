"""The CLI's contract: help, version, clear one-line errors with exit 2 and no traceback."""

import json
import subprocess
import sys

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
