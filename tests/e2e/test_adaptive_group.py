"""`xover run --mode adaptive` end to end through real horovodrun and real turn servers: a pair switched between
turns and none many times while it trains (XOVER_ADAPTIVE makes its windows short and its rule never sure,
so that it probes round after round), with every loss per iteration exactly the job's alone, every switch
made at one iteration of each job on all its devices, and each decision stored and shown by `xover report`."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import measured_or_apart

XOVER = [sys.executable, "-m", "xover"]
ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 150
# windows of 0.4 s, the first pair allowed the whole time left, a difference never counted (z 50), another pair
# probed whatever it costs (until=sure): three pairs a round, then the better estimate; again after 2 s settled
PROBING = "window=0.4,share=1,probe_share=1,pairs=3,z=50,until=sure,recheck=2,warmup=1"


def test_an_adaptive_pair_switches_at_one_iteration_everywhere_with_the_losses_of_the_jobs_alone(isolated_results):
    env = {**os.environ, "XOVER_ADAPTIVE": PROBING}
    result = subprocess.run([*XOVER, "run", "--group", "resnet-digits", "resnet-digits", "--mode", "sequential,adaptive",
                             "--iterations", str(ITERATIONS), "--json"], capture_output=True, text=True, timeout=600,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    experiment = report["experiment"]
    [group] = report["groups"]
    assert measured_or_apart(group, "adaptive"), group  # measured as a way of its own (if its jobs met past warm-up)
    db = sqlite3.connect(isolated_results / "xover.db")
    losses: dict[tuple[str, str], list[float]] = {}
    for name, mode, loss in db.execute("SELECT r.name, r.mode, m.loss FROM iteration_metrics m JOIN runs r ON "
                                       "r.id = m.run_id WHERE r.experiment_id = ? ORDER BY r.id, m.step", (experiment,)):
        losses.setdefault((name, mode), []).append(loss)
    for name in ("resnet-digits", "resnet-digits#2"):
        assert len(losses[(name, "sequential")]) == ITERATIONS
        assert losses[(name, "adaptive")] == losses[(name, "sequential")]  # exactly, every iteration
    # the iterations its evaluations (every 50) held up, as the controller is told them
    held = {}
    for name, mode, step, seconds in db.execute(
            "SELECT r.name, r.mode, m.step, m.evaluation_s FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
            "WHERE r.experiment_id = ? AND m.evaluation_s IS NOT NULL ORDER BY r.id, m.step", (experiment,)):
        assert seconds > 0
        held.setdefault((name, mode), []).append(step)
    assert held == {(name, mode): [50, 100] for name in ("resnet-digits", "resnet-digits#2")
                    for mode in ("sequential", "adaptive")}

    segments = db.execute("SELECT seq, kind, way, speeds, aggregate, decision FROM sharing_segments "
                          "WHERE experiment_id = ? ORDER BY seq", (experiment,)).fetchall()
    kinds = [kind for _, kind, *_ in segments]
    assert kinds[0] == "warm-up" and kinds.count("probe") >= 4 and "settled" in kinds
    probes = [(way, json.loads(speeds), aggregate) for _, kind, way, speeds, aggregate, _ in segments if kind == "probe"]
    assert {way for way, *_ in probes} == {"crossover", "concurrent"}
    measured = [(speeds, aggregate) for _, speeds, aggregate in probes if aggregate is not None]
    assert len(measured) >= 4 and all(set(speeds) == {"resnet-digits", "resnet-digits#2"} for speeds, _ in measured)
    decisions = [json.loads(decision) for _, kind, _, _, _, decision in segments if kind == "settled"]
    assert any(d.get("rule") == "pairs" and set(d["ways"]) == {"crossover", "concurrent"} for d in decisions)

    # every switch: both devices of each job at the same iteration (the one they were told), in the same state
    switched = [json.loads(detail) for (detail,) in db.execute(
        "SELECT detail FROM turn_events WHERE experiment_id = ? AND kind = 'switched'", (experiment,))]
    assert len({event["switch"] for event in switched}) >= 3
    by_switch_and_slot: dict[tuple[int, int], list[dict]] = {}
    for event in switched:
        by_switch_and_slot.setdefault((event["switch"], event["slot"]), []).append(event)
    for applied in by_switch_and_slot.values():
        assert sorted(event["device"] for event in applied) == [0, 1]
        assert len({event["iteration"] for event in applied}) == 1
        assert len({event["state"] for event in applied}) == 1

    shown = subprocess.run([*XOVER, "report", experiment, "--format", "json"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    [reported] = json.loads(shown.stdout)["groups"]
    assert [segment["kind"] for segment in reported["adaptive_timeline"]] == kinds
    assert set(reported["adaptive_time"]) == {"crossover", "concurrent"}
    assert abs(sum(reported["adaptive_time"].values()) - 1) < 1e-3
    table = subprocess.run([*XOVER, "report", experiment], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert table.returncode == 0 and "adaptive, its timeline" in table.stdout and "time in each way" in table.stdout
