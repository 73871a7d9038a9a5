"""bench/gpu/balanced_rate.py: the link rate at which a job's all-reduce takes as long as its compute."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.gpu.balanced_rate import balanced_rate_mbit  # noqa: E402
from xover.plan.model import link_busy_ms  # noqa: E402


def test_the_link_time_at_the_rate_equals_the_compute():
    profile = {"name": "resnet", "np": 2, "data_ms": 1.0, "compute_ms": 79.0, "gradient_mb": 97.5}
    rate = balanced_rate_mbit(profile)
    assert link_busy_ms(int(97.5 * 2**20), 2, 1, rate * 1e6) == pytest.approx(80.0, rel=0.01)
    assert balanced_rate_mbit(profile, ratio=2.0) == pytest.approx(rate / 2, abs=1)


def test_a_profile_without_a_rate_is_one_line_and_exit_1(tmp_path):
    empty = tmp_path / "p.json"
    empty.write_text(json.dumps([{"name": "x", "np": 1, "compute_ms": 5.0, "gradient_mb": 1.0}]))
    result = subprocess.run([sys.executable, "bench/gpu/balanced_rate.py", str(empty)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "no rate" in result.stderr
