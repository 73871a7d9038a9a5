"""A training script that forges xover's metric records changes nothing that xover records (docs/security.md)."""

import os
from pathlib import Path

DEVICE = ("localhost", 0)
NOBODY = 65534


def test_a_script_that_forges_metric_records_changes_nothing(isolated_results):
    """tests/assets/forged_metrics.py prints, at its third step, an exit, an end, records of the wrong
    shape and one with a token that is not its run's: the job still runs to its end, every step of its
    own is recorded, and what it forged is ignored (said once, on stderr)."""
    import json
    import sqlite3
    import subprocess
    import sys

    steps = 12
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "tests/assets/forged_metrics.py",
                             "--engine", "torch", "--mode", "sequential", "--np", "1", "--json", "--",
                             "--steps", str(steps)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "XOVER_LEASE_DIR": str(isolated_results / "leases")})
    assert result.returncode == 0, result.stderr[-3000:]
    [job] = json.loads(result.stdout)["jobs"]
    assert job["status"] == "finished" and job["iterations"] == steps, job
    with sqlite3.connect(isolated_results / "xover.db") as db:
        stored = db.execute("SELECT step, samples, time_s FROM iteration_metrics ORDER BY step").fetchall()
        [(peak,)] = db.execute("SELECT peak_memory_gb FROM runs").fetchall()
        evaluations = db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    assert [step for step, _, _ in stored] == list(range(steps))
    assert stored[4][1] != 8 or stored[4][2] != 1  # step 4 is the job's own, not the forged one
    assert peak != 123.0 and evaluations == 0
    assert "trained 12 steps" in (Path(job["log_dir"]) / "launcher.log").read_text()
    said = [line for line in result.stderr.splitlines() if "ignored" in line]
    assert len(said) == 2, result.stderr[-3000:]  # the first one, then how many in all
