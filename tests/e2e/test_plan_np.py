"""What `xover profile --np N` measured, `xover plan --np N` plans: the options a step takes mean the same
in the next step."""

import json
import subprocess
import sys

XOVER = [sys.executable, "-m", "xover"]


def _xover(*args, timeout=600):
    return subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=timeout)


def test_a_one_rank_profile_is_planned_with_np(isolated_results, tmp_path):
    profiled = _xover("profile", "mlp-digits", "--np", "1", "--no-corun", "--iterations", "6", "--warmup", "2")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    refused = _xover("plan", "mlp-digits", "--devices", "2")  # the recipe's own np (2) was not profiled
    assert refused.returncode == 2 and "(np 2)" in refused.stderr, refused.stderr
    plan_path = tmp_path / "plan.json"
    planned = _xover("plan", "mlp-digits", "--np", "1", "--devices", "1", "--out", str(plan_path))
    assert planned.returncode == 0, planned.stderr
    assert json.loads(plan_path.read_text())["jobs"]["mlp-digits"]["devices"] == 1
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nA,1,100,10,1\n")
    mixed = _xover("plan", "--profiles", str(trace), "--np", "1", "--devices", "1")
    assert mixed.returncode == 2 and "--np picks stored profiles" in mixed.stderr
