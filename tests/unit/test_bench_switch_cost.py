"""bench/switch_cost.py: a switch's cost to a job, in iterations of its pace after it, and the script's refusals."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from switch_cost import excess  # noqa: E402


def test_the_first_iterations_beyond_the_pace_after_are_the_cost_in_iterations_of_that_pace():
    # three iterations of 0.3, 0.25 and 0.2 s, then a pace of 0.2 s: 0.15 s beyond it, 0.75 of an iteration
    assert excess([0.3, 0.25, 0.2] + [0.2] * 10, 3) == pytest.approx(0.75)
    assert excess([0.1, 0.2, 0.2] + [0.2] * 10, 3) == pytest.approx(-0.5)  # faster at once: nothing lost
    assert excess([0.3, 0.25, 0.2, 0.2], 3) is None  # no pace after it to tell


def test_a_missing_store_or_a_bad_count_is_refused_with_exit_2(tmp_path):
    (tmp_path / "some.db").touch()
    for arguments in (["--db", str(tmp_path / "none.db")], ["--iterations", "0", "--db", str(tmp_path / "some.db")]):
        result = subprocess.run([sys.executable, str(ROOT / "bench" / "switch_cost.py"), *arguments],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "Traceback" not in result.stderr and result.stderr.strip()
