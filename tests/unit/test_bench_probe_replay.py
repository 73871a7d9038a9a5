"""bench/probe_replay.py: a unit's rounds as stored, a stored window as the rule reads it, and the refusals."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from probe_replay import rounds, window_of  # noqa: E402


def segment(kind, way="crossover", aggregate=1.2, rule=None):
    return {"kind": kind, "way": way, "aggregate": aggregate, "error": 0.04, "started": 0.0, "ended": 2.0,
            "window": [0.5, 2.0], "speeds": {"a": 0.6, "b": (aggregate or 0.6) - 0.6},
            "decision": {"rule": rule} if rule else None}


def test_a_round_is_its_measured_windows_up_to_the_segment_that_decided_it():
    timeline = [segment("warm-up"), segment("probe"), segment("probe", "concurrent"),
                segment("probe", "concurrent", aggregate=None), segment("settled", rule="clear"),
                segment("settled", rule="not probed"), segment("probe"), segment("alone")]
    [(probes, settled)] = rounds(timeline)
    assert [p["way"] for p in probes] == ["crossover", "concurrent"] and settled["decision"]["rule"] == "clear"


def test_a_stored_window_keeps_its_aggregate_and_its_error():
    window = window_of(segment("probe", aggregate=1.3))
    assert (window.start, window.end) == (0.5, 2.0)
    assert window.aggregate == pytest.approx(1.3) and window.error == pytest.approx(0.04)


def test_a_missing_store_is_refused_with_exit_2(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "probe_replay.py"), "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "no such store" in result.stderr and "Traceback" not in result.stderr
