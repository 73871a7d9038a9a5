"""`xover train` end to end: real horovodrun, np=2, Gloo; the same seed gives the same losses."""

import json
import os
import sqlite3
import subprocess
import sys


def _train(*args, env=None):
    result = subprocess.run([sys.executable, "-m", "xover", "train", *args, "--json"], capture_output=True,
                            text=True, timeout=300, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_train_twice_same_losses_and_queryable(isolated_results):
    first = _train("mlp-digits", "--iterations", "30")
    second = _train("mlp-digits", "--iterations", "30")
    [job] = first["jobs"]
    assert job["status"] == "finished" and job["exit_code"] == 0 and job["iterations"] == 30
    assert job["samples_per_s"] > 0 and 0.0 < job["accuracy"] <= 1.0

    db = sqlite3.connect(isolated_results / "xover.db")
    losses = []
    for result in (first, second):
        rows = db.execute("SELECT m.loss FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                          "WHERE r.experiment_id = ? ORDER BY m.step", (result["experiment"],)).fetchall()
        losses.append([loss for (loss,) in rows])
    assert len(losses[0]) == 30
    assert losses[0] == losses[1]  # exactly: CPU training is deterministic for a seed
    assert losses[0][-1] < losses[0][0]
    [(rate,)] = db.execute("SELECT samples_per_s FROM run_throughput WHERE experiment_id = ? AND name = ?",
                           (first["experiment"], "mlp-digits")).fetchall()
    assert rate > 0
    # each rank's full output is kept
    ranks = list((isolated_results / "results" / "runs" / first["experiment"]).glob("*/ranks/rank.*"))
    assert len(ranks) == 2


def test_the_thread_policy_alone_is_recorded_and_changes_no_loss(isolated_results):
    """XOVER_COMM_THREADS=always gives a job alone crossover's thread policy (bench/thread_policy.py)."""
    plain = _train("mlp-digits", "--iterations", "8")
    batch = _train("mlp-digits", "--iterations", "8", env={"XOVER_COMM_THREADS": "always"})
    assert [j["comm_threads"] for j in plain["jobs"] + batch["jobs"]] == ["normal", "batch"]
    assert plain["jobs"][0]["final_loss"] == batch["jobs"][0]["final_loss"]


def test_polling_from_the_start_changes_no_loss(isolated_results):
    """XOVER_WAIT=poll: the rank polls for its all-reduces without first sleeping through the transfer
    it expects (runtime/gradient_wait.py); only when the rank looks changes, not what it computes."""
    expecting = _train("mlp-digits", "--iterations", "8")
    polling = _train("mlp-digits", "--iterations", "8", env={"XOVER_WAIT": "poll"})
    assert expecting["jobs"][0]["final_loss"] == polling["jobs"][0]["final_loss"]
