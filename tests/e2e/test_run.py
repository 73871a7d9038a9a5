"""`xover run` end to end through real horovodrun: parity of losses, faults, Ctrl-C."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import measured_or_apart

from xover.run.reaper import tagged_processes

XOVER = [sys.executable, "-m", "xover"]
ROOT = Path(__file__).resolve().parents[2]
ROOT_RECIPES = ROOT / "recipes"
PAIR = ("mlp-digits", "resnet-digits")
JOB_KEYS = {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss"}


def _losses(db_path, experiment):
    db = sqlite3.connect(db_path)
    rows = db.execute("SELECT r.name, r.mode, r.policy, m.loss FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                      "WHERE r.experiment_id = ? ORDER BY r.id, m.step", (experiment,)).fetchall()
    out = {}
    for name, mode, policy, loss in rows:
        out.setdefault((name, f"{mode}:{policy}" if policy else mode), []).append(loss)
    return out


@pytest.fixture(scope="module")
def planned_comparison(tmp_path_factory):
    """A plan of a group of two (mlp-digits + resnet-digits) and a job planned alone (mlp-balanced), run
    once in every mode under both policies (adaptive under the first): what the two tests below read. One comparison serves both,
    since every run of it costs seconds of process starts (docs/measurements.md, *make test's time*)."""
    folder = tmp_path_factory.mktemp("planned-comparison")
    env = {**os.environ, "XOVER_DB": str(folder / "xover.db"), "XOVER_RESULTS": str(folder / "results")}
    trace = folder / "trace.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\n"
                     "resnet-digits,2,100,5,0.1,6\nmlp-digits,2,5,100,0.1,6\nmlp-balanced,2,50,50,0.1,6\n")
    plan_path = folder / "plan.json"
    made = subprocess.run([*XOVER, "plan", "--profiles", str(trace), "--devices", "2", "--out", str(plan_path),
                           "--json"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    result = subprocess.run([*XOVER, "run", str(plan_path), "--mode", "all", "--policy", "all", "--iterations",
                             "40", "--json"], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return {"plan": json.loads(made.stdout), "report": json.loads(result.stdout), "db": folder / "xover.db"}


def test_all_modes_and_policies_same_losses_exactly_and_turns_never_overlap(planned_comparison):
    report = planned_comparison["report"]
    pair = [job for job in report["jobs"] if job["name"] in PAIR]
    assert len(pair) == 10  # sequential x2, concurrent x2, crossover x2 per policy, adaptive x2
    for job in report["jobs"]:
        assert JOB_KEYS <= set(job)
        assert job["status"] == "finished" and job["iterations"] == 40
    crossover = [j for j in pair if j["mode"] == "crossover"]
    assert {j["policy"] for j in crossover} == {"work-conserving", "round-robin"}
    assert {j["policy"] for j in pair if j["mode"] == "adaptive"} == {"work-conserving"}  # the first policy only
    assert all(j["wait_ms"] is not None for j in crossover)
    [group] = report["groups"]
    # each a measured gain, or none where the jobs never met past warm-up (a loaded machine; no barrier in concurrent)
    assert measured_or_apart(group, "crossover") and measured_or_apart(group, "concurrent"), group
    if group["crossover_vs_sequential"] and group["concurrent_vs_sequential"]:
        assert group["crossover_vs_concurrent"] == pytest.approx(
            group["crossover_vs_sequential"] / group["concurrent_vs_sequential"])
    else:
        assert group["crossover_vs_concurrent"] is None
    assert set(group["policies"]) == {"work-conserving", "round-robin"}
    db = planned_comparison["db"]
    losses = _losses(db, report["experiment"])
    for recipe in PAIR:
        alone = losses[(recipe, "sequential")]
        assert len(alone) == 40
        for mode in ("concurrent", "crossover:work-conserving", "crossover:round-robin", "adaptive:work-conserving"):
            assert losses[(recipe, mode)] == alone, mode  # exactly, per iteration
    # both jobs' rank 0 run on device 0: under either policy their turns never overlap there
    for policy in ("work-conserving", "round-robin"):
        held = []
        with sqlite3.connect(db) as connection:
            for name, intervals in connection.execute(
                    "SELECT r.name, m.held FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                    "WHERE r.experiment_id = ? AND r.mode = 'crossover' AND r.policy = ?", (report["experiment"], policy)):
                held += [(start, end, name) for start, end in json.loads(intervals)]
        held.sort()
        assert len({name for *_, name in held}) == 2 and len(held) >= 80
        for (_, end, first), (start, _, second) in zip(held, held[1:]):
            assert end <= start + 1e-4, f"{policy}: {second} computed from {start} while {first} held until {end}"


def test_failing_job_is_recorded_and_partner_finishes(isolated_results, tmp_path):
    broken = tmp_path / "broken.toml"
    # passes validation, fails inside training: a batch of 4 x 3 x 10^7 x 10^7 floats is more than any
    # address space holds, so the allocation fails at once whatever the machine's overcommit setting
    broken.write_text('name = "broken"\nmodel = "mlp"\ndataset = "synthetic-images"\nbatch_size = 4\n'
                      'optimizer = "adam"\nlr = 0.001\nnp = 2\nseed = 1\niterations = 5\n'
                      '[dataset_options]\nimage_size = 10000000\n')
    result = subprocess.run([*XOVER, "run", "--group", "mlp-digits", str(broken), "--mode", "crossover",
                             "--iterations", "20", "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    jobs = {j["name"]: j for j in json.loads(result.stdout)["jobs"]}
    assert jobs["mlp-digits"]["status"] == "finished" and jobs["mlp-digits"]["iterations"] == 20
    assert jobs["broken"]["status"] == "failed" and jobs["broken"]["exit_code"] != 0
    assert "allocate" in jobs["broken"]["error"]


def _wait_for_iterations(db_path, name, count, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with sqlite3.connect(db_path) as db:
                [(done,)] = db.execute("SELECT COUNT(*) FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                                       "WHERE r.name = ? AND r.status = 'running'", (name,)).fetchall()
            if done >= count:
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{name} did not reach {count} iterations")


def _workers_of(results_dir):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(results_dir) in cmdline:
            found.append(proc)
    return found


def test_sigkill_of_one_job_lets_partner_continue_at_solo_speed(isolated_results):
    xover = subprocess.Popen([*XOVER, "run", "--group", "mlp-digits", "resnet-digits", "--mode", "crossover",
                              "--iterations", "400", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    _wait_for_iterations(isolated_results / "xover.db", "resnet-digits", 10)
    victims = [p for p in _workers_of(isolated_results / "results")  # the python worker, not horovodrun's sh
               if p.name().startswith("python") and "xover.runtime.worker" in " ".join(p.cmdline())
               and "resnet-digits" in " ".join(p.cmdline())]
    assert victims
    killed_at = time.time()
    os.kill(victims[0].pid, signal.SIGKILL)
    out, err = xover.communicate(timeout=300)
    jobs = {j["name"]: j for j in json.loads(out)["jobs"]}
    assert jobs["resnet-digits"]["status"] == "failed"
    assert jobs["mlp-digits"]["status"] == "finished" and jobs["mlp-digits"]["iterations"] == 400
    with sqlite3.connect(isolated_results / "xover.db") as db:
        after = db.execute("SELECT m.iteration_s, m.wait_s FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                           "WHERE r.name = 'mlp-digits' AND m.wall_time > ? ORDER BY m.step", (killed_at + 1.0,)).fetchall()
        # step 0 includes the start barrier (waiting for the partner to start), not a stall
        stall = db.execute("SELECT MAX(m.iteration_s) FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                           "WHERE r.name = 'mlp-digits' AND m.step > 0").fetchone()[0]
        phases = sorted(c for (c,) in db.execute(
            "SELECT m.compute_s FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
            "WHERE r.name = 'resnet-digits' AND m.wall_time < ?", (killed_at,)))
        trained_on = db.execute("SELECT COUNT(*) FROM iteration_metrics m JOIN runs r ON r.id = m.run_id "
                                "WHERE r.name = 'resnet-digits' AND m.wall_time > ?", (killed_at,)).fetchone()[0]
    assert after, "the partner had no iterations left after the kill"
    # the killed job got no further: at most the step in flight and one whose all-reduce was done
    assert trained_on <= 2, trained_on
    waits = sorted(wait for _, wait in after)
    phase = phases[len(phases) // 2]  # resnet-digits' turn, measured in this run before the kill
    # no turn to wait for any more: a round trip to the turn server, where a partner still counted would cost
    # its whole phase each time. Against that phase of the same run, not a fixed 20 ms: a loaded 2-core
    # machine (test workers beside it) slows the phase and the round trip's wake-ups alike
    assert waits[len(waits) // 2] < 0.5 * phase and waits[int(0.95 * len(waits))] < 2 * phase, (phase, waits[-5:])
    # The turn server drops a dead job at once (tests/integration/test_turns.py measures it under a second);
    # a dead holder still counted would stall its partner for its lease, 30 s at least (turns/server.py). Well
    # under that, with room for a loaded machine's hiccups around the kill (1.5 s and 3 s left a 3x slower one little)
    assert waits[-1] < 5.0 and stall < 10.0, (waits[-5:], stall)


def test_ctrl_c_stops_everything_and_leaves_nothing(isolated_results):
    from xover.turns.service import runtime_dir

    xover = subprocess.Popen([*XOVER, "run", "--group", "mlp-digits", "resnet-digits", "--mode", "crossover",
                              "--iterations", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_iterations(isolated_results / "xover.db", "mlp-digits", 5)
    xover.send_signal(signal.SIGINT)
    xover.communicate(timeout=60)
    assert xover.returncode == 130
    time.sleep(0.5)
    assert _workers_of(isolated_results / "results") == []
    with sqlite3.connect(isolated_results / "xover.db") as db:
        statuses = {s for (s,) in db.execute("SELECT status FROM runs")}
        [(experiment,)] = db.execute("SELECT id FROM experiments").fetchall()
    assert statuses == {"interrupted"}
    assert not [f for f in os.listdir(runtime_dir()) if f.startswith(experiment)]
    assert not tagged_processes(experiment)  # launchers, workers and turn servers: all gone


def test_jobs_of_different_sizes_share_a_group(isolated_results, tmp_path):
    small = tmp_path / "small.toml"
    small.write_text((ROOT_RECIPES / "mlp-digits.toml").read_text().replace('name = "mlp-digits"', 'name = "small"')
                     .replace("np = 2", "np = 1"))
    result = subprocess.run([*XOVER, "run", "--group", "resnet-digits", str(small), "--mode", "crossover",
                             "--iterations", "15", "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {j["name"]: j for j in json.loads(result.stdout)["jobs"]}
    assert jobs["small"]["np"] == 1 and jobs["resnet-digits"]["np"] == 2
    assert all(j["status"] == "finished" and j["iterations"] == 15 for j in jobs.values())


def test_a_plan_runs_as_scheduled_groups_side_by_side(isolated_results, tmp_path):
    """Two one-device groups of a plan on devices 0 and 1 run at the same time (start and end times in
    the store), and the run reports its makespan next to the plan's and to one after another."""
    trace = tmp_path / "trace.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\n"
                     "mlp-digits,1,2,8,0.1,150\nresnet-digits,1,30,5,0.1,40\n")
    plan_path = tmp_path / "plan.json"
    made = subprocess.run([*XOVER, "plan", "--profiles", str(trace), "--devices", "2", "--algo", "none",
                           "--out", str(plan_path), "--json"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    plan = json.loads(made.stdout)
    assert [g["wave"] for g in plan["groups"]] == [0, 0] and plan["predicted_makespan_ms"] < plan["sequential_makespan_ms"]
    for group in plan["groups"]:  # the trace names recipes; the plan keeps their iterations
        assert group["devices"] in (["localhost:0"], ["localhost:1"])
    result = subprocess.run([*XOVER, "run", str(plan_path), "--mode", "crossover", "--json"], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["schedule"]["groups_overlapping"] == 2
    assert report["schedule"]["predicted_makespan_s"] == pytest.approx(plan["predicted_makespan_ms"] / 1000)
    with sqlite3.connect(isolated_results / "xover.db") as db:
        spans = db.execute("SELECT group_index, started_at, ended_at, devices FROM runs ORDER BY group_index").fetchall()
    (_, start0, end0, devices0), (_, start1, end1, devices1) = spans
    assert {devices0, devices1} == {"0", "1"}
    assert start1 < end0 and start0 < end1  # they overlapped in time


def test_a_job_planned_alone_runs_once_in_a_comparison(planned_comparison):
    """A group of one job shares nothing: `--mode all --policy all` runs it alone once, not once per
    mode and policy (it used to, and the report then summed its runs as if they were partners)."""
    assert sorted(len(g["jobs"]) for g in planned_comparison["plan"]["groups"]) == [1, 2]
    report = planned_comparison["report"]
    runs = {}
    for job in report["jobs"]:
        runs.setdefault(job["name"], []).append(f"{job['mode']}:{job.get('policy') or '-'}")
    assert runs["mlp-balanced"] == ["sequential:-"]
    assert sorted(runs["resnet-digits"]) == ["adaptive:work-conserving", "concurrent:-", "crossover:round-robin",
                                             "crossover:work-conserving", "sequential:-"]
    assert [sorted(g["jobs"]) for g in report["groups"]] == [["mlp-digits", "resnet-digits"]]
