"""`xover run --script` refuses, in one line, a script whose engine cannot be found from its imports."""


import pytest
from typer.testing import CliRunner

from xover.cli import app


@pytest.mark.parametrize("source, needle", [
    ("import os\n", "imports neither"),
    ("import horovod.torch\nimport torch.distributed\n", "imports both"),
])
def test_xover_run_refuses_a_script_it_cannot_place_with_one_line(tmp_path, source, needle):
    script = tmp_path / "train.py"
    script.write_text(source)
    result = CliRunner().invoke(app, ["run", "--script", str(script), "--mode", "sequential"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: --script") and str(script) in line and needle in line and "--engine" in line
