"""The torch.distributed engine (torchrun): same losses as Horovod, and crossover with parity."""

import json
import sqlite3
import subprocess
import sys

from conftest import COMPARISON_ITERATIONS

XOVER = [sys.executable, "-m", "xover"]
# the torch run's length: a step's loss does not depend on how long the run is (no schedule), so the first 60 of
# the reference's 150 are compared (past the evaluation at step 50); before, all 150, for 2.5 times the iterations
TORCH_ITERATIONS = 60


def _losses(db_path, experiment):
    rows = sqlite3.connect(db_path).execute(
        "SELECT r.name, r.mode, r.engine, m.loss FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
        "WHERE r.experiment_id = ? ORDER BY r.id, m.step", (experiment,)).fetchall()
    out = {}
    for name, mode, engine, loss in rows:
        out.setdefault((name, mode, engine), []).append(loss)
    return out


def _json(*args):
    result = subprocess.run([*XOVER, *args, "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_torch_engine_matches_horovod_and_keeps_parity_under_crossover(isolated_results, comparison_run):
    db = isolated_results / "xover.db"
    # Horovod's losses of mlp-digits alone: its sequential run in the session's comparison (tests/conftest.py)
    iterations = TORCH_ITERATIONS
    torch_run = _json("run", "--group", "mlp-digits", "resnet-digits", "--engine", "torch", "--mode",
                      "sequential,crossover", "--iterations", str(iterations))
    assert all(j["status"] == "finished" and j["iterations"] == iterations for j in torch_run["jobs"])
    reference = _losses(comparison_run["XOVER_DB"], comparison_run["experiment"])[("mlp-digits", "sequential", "horovod")]
    assert len(reference) == COMPARISON_ITERATIONS
    losses = _losses(db, torch_run["experiment"])
    for mode in ("sequential", "crossover"):
        # np=2: both engines sum the two gradients (a+b is exact either way) and halve: equal bits
        assert losses[("mlp-digits", mode, "torch")] == reference[:iterations]
        assert losses[("resnet-digits", mode, "torch")] == losses[("resnet-digits", "sequential", "torch")]
