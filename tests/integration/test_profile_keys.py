"""A job's profile holds for it however long it runs and whatever its `max_slowdown` (Recipe.profile_key): a real
`xover profile`, then the same recipe made longer and protected, profiled and planned from that profile."""

import json
import subprocess
import sys
from pathlib import Path

XOVER = [sys.executable, "-m", "xover"]


def _xover(*args):
    result = subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_recipe_made_longer_or_protected_keeps_its_profile(isolated_results, tmp_path):
    # helper-90's probe, 2026-12-07: `iterations = 400` in a copy of a profiled recipe was "no horovod profile of
    # 'my-mlp': run `xover profile ...` first", and `xover profile` of it measured it all over again
    [first] = json.loads(_xover("profile", "mlp-digits", "--iterations", "12", "--warmup", "4", "--no-corun",
                                "--no-stretch", "--json").stdout)
    assert first["reused"] is False
    longer = tmp_path / "mlp-digits.toml"
    text = Path("recipes/mlp-digits.toml").read_text()  # the fixture runs in the checkout
    longer.write_text(text.replace("iterations = 200", "iterations = 4000\nmax_slowdown = 1.5"))
    [again] = json.loads(_xover("profile", str(longer), "--iterations", "12", "--warmup", "4", "--no-corun",
                                "--no-stretch", "--json").stdout)
    assert again["reused"] is True and again["compute_ms"] == first["compute_ms"]
    plan = tmp_path / "plan.json"
    _xover("plan", str(longer), "--devices", "2", "--out", str(plan))
    [job] = json.loads(plan.read_text())["jobs"].values()
    assert job["iterations"] == 4000 and job["max_slowdown"] == 1.5 and job["compute_ms"] == first["compute_ms"]
