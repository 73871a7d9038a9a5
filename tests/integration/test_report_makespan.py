"""`xover report` of a plan's run in one way: its makespan measured, beside the same plan's run of the other kind
(shared, or one after another), also measured, and beside the plan's prediction; and the groups none of whose
jobs ran alone said to be why their gains are empty. Before, only `xover run` said the makespan, and the report of
such a run showed a groups' table of dashes with no word of why."""

import json
import os
import socket
from datetime import datetime, timedelta
from pathlib import Path

import psutil
from typer.testing import CliRunner

from xover.analysis import job_summary
from xover.cli import app
from xover.store.models import Experiment, IterationMetric, Plan, RecipeSnapshot, Run, TurnEvent
from xover.store.session import open_store

runner = CliRunner()
T0 = datetime(2026, 1, 1, 12, 0, 0)
BODY = {"predicted_makespan_ms": 50_000.0, "sequential_makespan_ms": 90_000.0,
        "jobs": {"a": {"iterations": 10}, "b": {"iterations": 10}}, "groups": []}
PLANNED, ONE_AFTER_ANOTHER = "20260101-120000-plan", "20260101-130000-seqn"


def report(*args: str):
    return runner.invoke(app, ["report", *args])


def _experiment(session, recipe: int, experiment_id: str, command: str, runs, body=BODY, iterations=10) -> None:
    """An experiment of a plan (its own row of `body`, as each `xover run PLAN` stores one); `runs`: (name, mode,
    start s, end s) from T0."""
    plan = Plan(algo="matching", body=body, predicted_aggregate_gain=1.5)
    session.add(plan)
    session.flush()
    session.add(Experiment(id=experiment_id, kind="run", command=command, status="finished", plan_id=plan.id,
                           bandwidth="1gbit", created_at=T0))
    for name, mode, start, end in runs:
        run = Run(experiment_id=experiment_id, recipe_id=recipe, name=name, mode=mode, group_index=0,
                  hosts="localhost:2", np=2, status="finished", exit_code=0, iterations_planned=iterations,
                  started_at=T0 + timedelta(seconds=start), ended_at=T0 + timedelta(seconds=end))
        session.add(run)
        session.flush()
        for step in range(iterations):
            session.add(IterationMetric(run_id=run.id, step=step, time_s=step + 1.0, wall_time=1000.0 + step,
                                        iteration_s=1.0, data_s=0.0, compute_s=0.5, communication_s=0.5, wait_s=0.0,
                                        samples=64, loss=2.0 - 0.1 * step))


def _store(db: Path, *, one_after_another=True, planned_command="xover run plan.json") -> None:
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
        session.add(recipe)
        session.flush()
        _experiment(session, recipe.id, PLANNED, planned_command,
                    [("a", "crossover", 0, 38), ("b", "crossover", 2, 40)])
        if one_after_another:
            _experiment(session, recipe.id, ONE_AFTER_ANOTHER, "xover run plan.json --mode sequential",
                        [("a", "sequential", 0, 40), ("b", "sequential", 45, 85)])
        # not the same: other lengths, and another plan's content
        _experiment(session, recipe.id, "20260101-120500-long", "xover run plan.json --mode sequential",
                    [("a", "sequential", 0, 80), ("b", "sequential", 80, 160)], iterations=20)
        _experiment(session, recipe.id, "20260101-121000-othr", "xover run other.json --mode sequential",
                    [("a", "sequential", 0, 10), ("b", "sequential", 10, 20)],
                    body={**BODY, "predicted_makespan_ms": 1.0})
    store.close()


def _said(*args: str) -> str:
    result = report(*args)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_a_planned_run_and_its_jobs_one_after_another_are_set_side_by_side_both_measured(isolated_results):
    _store(isolated_results / "xover.db")
    planned = _said(PLANNED)
    assert ("makespan 40.0 s measured (the plan's jobs sharing devices, first job's start to last job's end); the "
            f"plan predicted 50.0 s; its jobs one after another: 85.0 s measured in {ONE_AFTER_ANOTHER} (2.12x "
            "faster shared)") in planned, planned
    alone = _said(ONE_AFTER_ANOTHER)
    assert ("makespan 85.0 s measured (its jobs one after another, first job's start to last job's end); the plan "
            f"predicted 90.0 s; as planned: 40.0 s measured in {PLANNED} (2.12x faster shared)") in alone, alone
    # the planned run's groups: no job of them ran alone in it, and the report says that is why nothing is measured
    assert "group 0: no job ran alone in this experiment, so no gain is measured" in planned
    assert "no job ran alone" not in alone
    shown = json.loads(report(PLANNED, "--format", "json").stdout)["makespan"]
    assert shown == {"measured_s": 40.0, "one_after_another": False, "predicted_s": 50.0,
                     "other_experiment": ONE_AFTER_ANOTHER, "other_s": 85.0, "running": False}
    page = isolated_results / "r.html"
    assert report(PLANNED, "--format", "html", "--out", str(page)).exit_code == 0
    assert "<p>makespan 40.0 s measured" in page.read_text()


def test_a_planned_run_still_running_is_said_to_be_so_not_to_have_a_job_that_did_not_finish(isolated_results):
    """`xover report latest` while a plan's run ran said "not measured, a job did not finish" (the probe's F3)."""
    _store(isolated_results / "xover.db", one_after_another=False)
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        running = session.get(Experiment, PLANNED)  # owned by this live process, as `xover run`'s own is
        running.status, running.owner_host, running.owner_pid = "running", socket.gethostname(), os.getpid()
        running.owner_started = psutil.Process().create_time()
        for run in session.get(Experiment, PLANNED).runs:
            if run.name == "b":
                run.status, run.ended_at = "running", None
    store.close()
    assert "makespan (the plan's jobs sharing devices): not measured, still running" in _said(PLANNED)
    assert json.loads(report(PLANNED, "--format", "json").stdout)["makespan"]["running"] is True


def test_without_a_run_one_after_another_the_report_says_how_to_make_one(isolated_results):
    _store(isolated_results / "xover.db", one_after_another=False)
    planned = _said(PLANNED)
    assert ("the plan predicted 50.0 s; no run of this plan one after another with the same jobs, lengths and link "
            "to set beside it (`xover run PLAN --mode sequential` with the same options)") in planned, planned


def test_lengths_other_than_the_plans_get_no_prediction(isolated_results):
    """Under --seconds the plan's predicted makespans are for other lengths: not set beside the measured one."""
    _store(isolated_results / "xover.db", planned_command="xover run plan.json --seconds 15")
    planned = _said(PLANNED)
    assert "makespan 40.0 s measured" in planned and "the plan predicted" not in planned, planned
    assert json.loads(report(PLANNED, "--format", "json").stdout)["makespan"]["predicted_s"] is None


def test_a_comparison_has_no_makespan_line(isolated_results):
    """Each job in several modes: a comparison, whose modes ran one after another; no makespan is said."""
    db = isolated_results / "xover.db"
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
        session.add(recipe)
        session.flush()
        _experiment(session, recipe.id, PLANNED, "xover run plan.json --mode all",
                    [("a", "sequential", 0, 10), ("b", "sequential", 10, 20), ("a", "crossover", 20, 30),
                     ("b", "crossover", 20, 30)])
    store.close()
    assert "makespan" not in _said(PLANNED)
    assert json.loads(report(PLANNED, "--format", "json").stdout)["makespan"] is None


def test_report_all_counts_a_job_that_never_started(isolated_results):
    """Job c was refused: no run of it, one unit not started naming it; `report all` counted 2 jobs."""
    _store(isolated_results / "xover.db", one_after_another=False)
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        session.add(TurnEvent(experiment_id=PLANNED, group_index=1, host="localhost", kind="not-started",
                              detail={"mode": "sequential", "policy": None, "jobs": ["c"], "why": "c: refused"}))
    store.close()
    listed = json.loads(report("all", "--format", "json").stdout)["experiments"]
    [row] = [row for row in listed if row["id"] == PLANNED]
    assert row["jobs"] == 3 and row["runs"] == 2, row


def test_a_run_without_iterations_has_no_yields():
    """A run that failed before its first iteration showed `yields 0`: it has no figure, as its times have none."""
    assert job_summary({"mode": "crossover", "status": "failed"}, [], [])["yields"] is None
    row = {"iteration_s": 1.0, "samples": 1, "yields": 2}
    assert job_summary({"mode": "crossover", "status": "finished"}, [row, row], [])["yields"] == 4


def test_a_plan_file_edited_by_hand_then_run_gets_no_prediction(isolated_results):
    """Its jobs' lengths edited by hand (200 and 100 iterations to 30), the plan file kept the makespans predicted
    for the old: `run` and `report` set 13.2 s predicted beside 10.2 s measured, as if it ran faster."""
    from xover.plan import JobProfile, local_hosts, make_plan, plan_to_dict

    plan = make_plan([JobProfile("a", 1, 10.0, 30.0, 0.1, iterations=200),
                      JobProfile("b", 1, 30.0, 5.0, 0.1, iterations=100)], local_hosts(1))
    edited = json.loads(json.dumps(plan_to_dict(plan)))
    for job in edited["jobs"].values():
        job["iterations"] = 10
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
        session.add(recipe)
        session.flush()
        _experiment(session, recipe.id, PLANNED, "xover run plan.json", [("a", "crossover", 0, 38),
                                                                          ("b", "crossover", 2, 40)], body=edited)
    store.close()
    planned = _said(PLANNED)
    assert "makespan 40.0 s measured" in planned and "the plan predicted" not in planned, planned
    assert json.loads(report(PLANNED, "--format", "json").stdout)["makespan"]["predicted_s"] is None
