"""`xover train` end to end: real horovodrun, np=2, Gloo; the same seed gives the same losses.

One plain run of mlp-digits is the reference of every test here (a module fixture): trained again it
gives the same losses; with crossover's thread policy and polling from the start, the same final loss."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

ITERATIONS = "30"


def _train(*args, env=None):
    result = subprocess.run([sys.executable, "-m", "xover", "train", *args, "--json"], capture_output=True,
                            text=True, timeout=300, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """`xover train mlp-digits` once for the module, into a store of its own (which every test here uses)."""
    folder = tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XOVER_DB", str(folder / "xover.db"))
        patch.setenv("XOVER_RESULTS", str(folder / "results"))
        first = _train("mlp-digits", "--iterations", ITERATIONS)
    return first, folder


@pytest.fixture
def store(plain_run, monkeypatch):
    _, folder = plain_run
    monkeypatch.setenv("XOVER_DB", str(folder / "xover.db"))
    monkeypatch.setenv("XOVER_RESULTS", str(folder / "results"))
    return folder


def test_train_twice_same_losses_and_queryable(plain_run, store):
    first, _ = plain_run
    second = _train("mlp-digits", "--iterations", ITERATIONS)
    [job] = first["jobs"]
    assert job["status"] == "finished" and job["exit_code"] == 0 and job["iterations"] == 30
    assert job["samples_per_s"] > 0 and 0.0 < job["accuracy"] <= 1.0

    db = sqlite3.connect(store / "xover.db")
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
    ranks = list((store / "results" / "runs" / first["experiment"]).glob("*/ranks/rank.*"))
    assert len(ranks) == 2


def test_the_thread_policy_alone_and_polling_from_the_start_are_recorded_and_change_no_loss(plain_run, store):
    """XOVER_COMM_THREADS=always gives a job alone crossover's thread policy (bench/thread_policy.py); XOVER_WAIT=poll:
    the rank polls for its all-reduces without first sleeping through the transfer it expects
    (runtime/gradient_wait.py); only when the rank looks changes, not what it computes. Both in one run (it was a
    run each): either changing what is computed changes the final loss."""
    plain, _ = plain_run
    changed = _train("mlp-digits", "--iterations", ITERATIONS, env={"XOVER_COMM_THREADS": "always", "XOVER_WAIT": "poll"})
    assert [j["comm_threads"] for j in plain["jobs"] + changed["jobs"]] == ["normal", "batch"]
    assert plain["jobs"][0]["final_loss"] == changed["jobs"][0]["final_loss"]
