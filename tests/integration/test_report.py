"""`xover report` on a hand-made store (the figures, gains, parity, a run off its profile) and its errors (one real
comparison run: tests/e2e/test_report_of_a_run.py)."""

import csv
import io
import json
import os
import sqlite3
from contextlib import closing
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from xover.cli import app
from xover.report.tables import turn_rows
from xover.store.models import (
    Experiment,
    IterationMetric,
    Plan,
    PlanGroup,
    Profile,
    RecipeSnapshot,
    Run,
    SharingSegment,
    TurnEvent,
)
from xover.store.session import open_store

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JOB_KEYS = {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss",
            "slowdown", "accuracy"}
ITERATION_COLUMNS = ["experiment", "run_id", "name", "mode", "policy", "step", "wall_time", "iteration_s", "data_s",
                     "compute_s", "communication_s", "wait_s", "samples", "loss", "yields", "link_s", "comm_cpu_s"]
runner = CliRunner()


def report(*args: str):
    return runner.invoke(app, ["report", *args])


# ------------------------------------------------------------------------------ one real comparison run


# ------------------------------------------------------------------------------ a hand-made store


def _plan_of_a_and_b_run(session, experiment_id: str, body: dict, gain: float) -> RecipeSnapshot:
    """Job a's recipe, and a plan of one group of a and b predicted at `gain` (its file's content `body`), run as
    the finished experiment `experiment_id`."""
    recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
    plan = Plan(algo="matching", body=body, predicted_aggregate_gain=gain)
    session.add_all([recipe, plan])
    session.flush()
    session.add(PlanGroup(plan_id=plan.id, index=0, jobs=["a", "b"], devices=[], wave=0, predicted_period_ms=50.0,
                          predicted_gain=gain))
    session.add(Experiment(id=experiment_id, kind="run", command="xover run plan.json", status="finished",
                           plan_id=plan.id))
    return recipe


def _hand_made_store(db: Path) -> None:
    """Job a: 30 ms compute + 10 ms all-reduce; job b: 10 + 30. Alone each takes 40 ms an iteration;
    taking turns both finish an iteration every 40 ms, so the gain is 2.0 (the model says 2.0 too).
    The plan predicted 1.6; b's loss under crossover drifts by 0.5 at step 3."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = _plan_of_a_and_b_run(session, "20260101-000000-plan", {}, 1.6)
        session.add(Experiment(id="20260101-000100-solo", kind="train", command="xover train a", status="finished"))
        runs = [("20260101-000000-plan", name, mode) for mode in ("sequential", "crossover") for name in ("a", "b")]
        runs.append(("20260101-000100-solo", "a", "solo"))
        for experiment, name, mode in runs:
            run = Run(experiment_id=experiment, recipe_id=recipe.id, name=name, mode=mode,
                      group_index=None if mode == "solo" else 0,
                      slot=("a", "b").index(name) if mode == "crossover" else None,
                      hosts="localhost:2", np=2, status="finished", exit_code=0)
            session.add(run)
            session.flush()
            compute, communication = (0.030, 0.010) if name == "a" else (0.010, 0.030)
            wait = 0.0 if mode != "crossover" else (0.010 if name == "a" else 0.0)
            for step in range(10):
                loss = 2.0 - 0.1 * step + (0.5 if (name, mode, step) == ("b", "crossover", 3) else 0.0)
                session.add(IterationMetric(run_id=run.id, step=step, time_s=0.04 * (step + 1),
                                            wall_time=1000.0 + 0.04 * (step + 1), iteration_s=0.04, data_s=0.0,
                                            compute_s=compute, communication_s=communication - wait, wait_s=wait,
                                            samples=64, loss=loss))
    store.close()


def _adaptive_runs_of_a_and_b(session, experiment_id: str, recipe: RecipeSnapshot, start: float) -> list[int]:
    """Adaptive runs of a and b in group 0 of `experiment_id`: 10 iterations of 50 ms each from wall time `start`
    (speed 0.8 against the hand-made store's 40 ms alone); their run ids."""
    runs = []
    for slot, name in enumerate(("a", "b")):
        run = Run(experiment_id=experiment_id, recipe_id=recipe.id, name=name, mode="adaptive", policy="work-conserving",
                  group_index=0, slot=slot, hosts="localhost:2", np=2, status="finished", exit_code=0)
        session.add(run)
        session.flush()
        runs.append(run.id)
        for step in range(10):
            session.add(IterationMetric(run_id=run.id, step=step, time_s=0.05 * (step + 1),
                                        wall_time=start + 0.05 * (step + 1), iteration_s=0.05, data_s=0.0,
                                        compute_s=0.02, communication_s=0.02, wait_s=0.01, samples=64,
                                        loss=2.0 - 0.1 * step))
    return runs


def _with_adaptive(db: Path) -> None:
    """The plan's experiment gets an adaptive run of a and b: 10 iterations of 50 ms each (speed 0.8, aggregate
    1.6), and its timeline: a warm-up, two probes, a decision for crossover with its figures."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = session.scalars(select(RecipeSnapshot)).first()
        runs = _adaptive_runs_of_a_and_b(session, "20260101-000000-plan", recipe, 2000.0)
        decision = {"rule": "clear", "ways": {"crossover": 1.6, "concurrent": 1.2}, "difference": 0.4,
                    "difference_error": 0.05, "aggregate": {"turns": 1.6, "free": 1.2}, "windows": 2,
                    "measured_before": {"difference": 0.25, "error": 0.06},
                    "combined": {"difference": 0.3, "error": 0.035}}
        for seq, (kind, way, started, ended, aggregate, reason, figures) in enumerate([
                ("warm-up", "concurrent", 2000.0, 2000.1, None, "the jobs start in the prior", None),
                ("probe", "concurrent", 2000.1, 2000.2, 1.2, "start: round 1, window 1",
                 {"length_s": 0.1, "relative_to_fastest_seen": ["b"]}),
                ("probe", "crossover", 2000.2, 2000.3, 1.6, "round 1, window 2",
                 {"length_s": 0.1, "evaluations": {"left_out_s": {"a": 0.81, "b": 0.86},
                                                   "charged": {"a": 1.05, "b": 0.912}}}),
                ("settled", "crossover", 2000.3, 2000.5, 1.6, "round 1: the difference is clear", decision)]):
            session.add(SharingSegment(experiment_id="20260101-000000-plan", run_id=runs[0], runs=runs, group_index=0,
                                       seq=seq, kind=kind, way=way, reason=reason, started=started, ended=ended,
                                       speeds={"a": aggregate / 2, "b": aggregate / 2} if aggregate else {},
                                       aggregate=aggregate, error=0.02 if aggregate else None, decision=figures))
    store.close()


def test_an_adaptive_groups_timeline_of_ways_and_its_share_of_time_in_each(isolated_results):
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    _with_adaptive(db)
    [group] = json.loads(report("plan", "--format", "json").stdout)["groups"]
    assert group["adaptive_vs_sequential"] == pytest.approx(1.6)  # 0.8 + 0.8: 50 ms against 40 ms alone each
    assert group["adaptive_vs_best"] == pytest.approx(0.8)  # crossover measured 2.0
    assert group["adaptive_way"] == "crossover"
    assert [segment["kind"] for segment in group["adaptive_timeline"]] == ["warm-up", "probe", "probe", "settled"]
    assert group["adaptive_timeline"][3]["decision"]["ways"] == {"crossover": 1.6, "concurrent": 1.2}
    assert group["adaptive_time"] == {"concurrent": pytest.approx(0.4), "crossover": pytest.approx(0.6)}
    parity = {(p["name"], p["mode"]): p for p in json.loads(report("plan", "--format", "json").stdout)["parity"]}
    assert parity[("a", "adaptive")]["identical"] and parity[("b", "adaptive")]["steps"] == 10
    table = " ".join(report("plan").output.split())
    assert "adaptive, its timeline" in table and "concurrent 40%, crossover 60%" in table
    assert "round 1: the difference is clear (crossover 1.600, concurrent 1.200; difference +0.400 +/- 0.050)" in table
    assert "as whole runs measured them before: +25.0% +/- 6.0%" in table
    assert ("round 1, window 2; 0.9 s held up by an evaluation left out; evaluations charged: a x1.050, b x0.912"
            in table)
    # a job with no time alone known: its speeds are against a stand-in, and the row says so (the cell wraps)
    assert "window 1; no time alone known for b (profile at this link, or run alone beside it)" in table
    assert "its pace when first measured, not to alone" in table
    html = report("plan", "--format", "html", "--out", str(isolated_results / "r.html"))
    assert html.exit_code == 0, html.output
    page = (isolated_results / "r.html").read_text()
    assert "Adaptive: the way each group ran in, and why" in page and 'id="adaptive"' in page


def _with_two_turn_policies(db: Path, name_b: str) -> None:
    """The plan's crossover runs were under work-conserving; a and b ran under round-robin too (their iterations
    45 ms: a gain of about 1.8); job b is named `name_b`."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = session.scalars(select(RecipeSnapshot)).first()
        for run in session.scalars(select(Run).where(Run.mode == "crossover")):
            run.policy = "work-conserving"
        for slot, name in enumerate(("a", "b")):
            run = Run(experiment_id="20260101-000000-plan", recipe_id=recipe.id, name=name, mode="crossover",
                      policy="round-robin", group_index=0, slot=slot, hosts="localhost:2", np=2, status="finished",
                      exit_code=0)
            session.add(run)
            session.flush()
            for step in range(10):
                session.add(IterationMetric(run_id=run.id, step=step, time_s=0.045 * (step + 1),
                                            wall_time=3000.0 + 0.045 * (step + 1), iteration_s=0.045, data_s=0.0,
                                            compute_s=0.02, communication_s=0.02, wait_s=0.005, samples=64,
                                            loss=2.0 - 0.1 * step, yields=1))
        for run in session.scalars(select(Run).where(Run.name == "b")):
            run.name = name_b
    store.close()


def test_the_html_page_has_the_tables_by_turn_policy_and_of_turns(isolated_results):
    """The terminal showed crossover by turn policy and the turns under crossover; the HTML page had neither."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    name = "b<i>&amp;"  # a job's name is the user's: text on the page, never markup
    _with_two_turn_policies(db, name)
    table = " ".join(report("plan").output.split())
    assert "crossover by turn policy" in table and "turns under crossover" in table
    result = report("plan", "--format", "html", "--out", str(isolated_results / "r.html"))
    assert result.exit_code == 0, result.output
    page = (isolated_results / "r.html").read_text()
    assert "<h2>Crossover by turn policy</h2>" in page and "<h2>Turns under crossover</h2>" in page
    policies = page.split("<h2>Crossover by turn policy</h2>")[1].split("<h2>")[0]
    assert policies.count("<tr>") == 3  # the header, and the group under each policy
    assert "<td>round-robin</td>" in policies and "<td>work-conserving</td>" in policies
    assert "<td>a + b&lt;i&gt;&amp;amp;</td>" in policies
    turns = page.split("<h2>Turns under crossover</h2>")[1].split("<h2>")[0]
    assert turns.count("<tr>") == 5  # the header, and each job under each policy
    assert "<td>b&lt;i&gt;&amp;amp;</td>" in turns and "<th>turn wait p50 ms</th>" in turns
    assert name not in page  # nowhere as markup


def test_gains_error_and_parity_from_a_plan(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    result = report("plan", "--format", "json")  # the end of an id is enough
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [group] = data["groups"]
    assert group["predicted_gain"] == pytest.approx(1.6)
    assert group["measured_gain"] == pytest.approx(2.0)
    assert group["model_gain"] == pytest.approx(2.0)
    assert group["gain_error_pct"] == pytest.approx(25.0)
    parity = {p["name"]: p for p in data["parity"]}
    assert parity["a"]["max_abs_loss_diff"] == 0.0 and parity["a"]["identical"]
    assert parity["b"]["max_abs_loss_diff"] == pytest.approx(0.5) and not parity["b"]["identical"]
    assert "losses" in data["pictures"] and "predicted_vs_measured" in data["pictures"]


def test_a_group_run_without_a_plan_has_crossovers_prediction_from_the_model_as_concurrents(isolated_results):
    """A group run without a plan showed "concurrent predicted" (the model's) and "-" under "crossover predicted",
    though the model simulates it too (the JSON's `simulated`)."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE experiments SET plan_id = NULL")
    [group] = json.loads(report("plan", "--format", "json").stdout)["groups"]
    assert group["predicted_gain"] is None  # no plan
    assert group["crossover_predicted"] == pytest.approx(group["simulated"]["round-robin"]["gain"])
    assert group["crossover_predicted"] == pytest.approx(2.0)  # 30 + 10 beside 10 + 30: each a whole iteration in 40 ms
    [row] = [line for line in report("plan").output.splitlines() if "a + b" in line and "2.00" in line][-1:]
    assert row.count("2.00") == 2, row  # crossover measured, and its prediction


def test_a_plans_run_as_planned_shows_the_gain_predicted_for_its_pick_as_xover_run_does(isolated_results):
    """A plan's adaptive group run as planned: `xover run` showed the pick's predicted gain (1.62, adaptive: its better
    way's), `xover report` crossover's (1.54) under the same title."""
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        body = {"groups": [{"jobs": ["a", "b"], "sharing": "adaptive", "predicted_gain": 1.615,
                            "predicted_by_sharing": {"crossover": 1.538, "concurrent": 1.615, "adaptive": 1.615}}]}
        recipe = _plan_of_a_and_b_run(session, "20260101-000000-asplanned", body, 1.615)
        _adaptive_runs_of_a_and_b(session, "20260101-000000-asplanned", recipe, 1000.0)
    store.close()
    [group] = json.loads(report("asplanned", "--format", "json").stdout)["groups"]
    assert group["predicted_gain"] == pytest.approx(1.615)  # as `xover run` says it
    assert group["crossover_predicted"] == pytest.approx(1.538)


def test_a_run_alone_off_its_profile_is_flagged(isolated_results):
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = session.scalars(select(RecipeSnapshot)).first()
        for name, compute_ms, created in (("a", 20.0, datetime(2025, 1, 1)), ("b", 10.0, datetime(2025, 1, 1)),
                                          ("b", 5.0, datetime(2030, 1, 1))):  # taken after the run: not its profile
            session.add(Profile(recipe_id=recipe.id, recipe_hash="h", name=name, np=2, bandwidth="host",
                                hardware="x", iterations=10, data_ms=0.0, compute_ms=compute_ms, comm_ms=10.0,
                                iteration_ms=compute_ms + 10.0, samples_per_s=1.0, memory_gb=0.1, gradient_bytes=1,
                                link_ms=None, comm_cpu_ms=None, checkpoints=None, spread={}, created_at=created))
    store.close()
    [group] = json.loads(report("plan", "--format", "json").stdout)["groups"]
    assert group["alone_vs_profile"] == {"a": pytest.approx(1.5), "b": pytest.approx(1.0)}
    output = " ".join(report("plan").output.split())  # the table wraps long lines
    assert "a's run alone needed 50% more device time per iteration than its profile" in output
    assert "b's run alone" not in output


def _profile_with_interference(db: Path, interference: float, created: datetime) -> None:
    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = session.scalars(select(RecipeSnapshot)).first()
        for name, compute_ms in (("a", 30.0), ("b", 10.0)):
            session.add(Profile(recipe_id=recipe.id, recipe_hash="h", name=name, np=2, bandwidth="host",
                                hardware="x", iterations=10, data_ms=0.0, compute_ms=compute_ms, comm_ms=10.0,
                                iteration_ms=compute_ms + 10.0, samples_per_s=1.0, memory_gb=0.1, gradient_bytes=1,
                                link_ms=None, comm_cpu_ms=None, checkpoints=None, spread={}, created_at=created,
                                interference=interference, corun_partner_link_share=0.3))
    store.close()


def test_a_profile_taken_after_the_run_leaves_its_reports_model_as_it_was(isolated_results):
    """The model of a group (its prediction without turns charges each job's interference) reads the profiles as they
    were when the experiment began: a later `xover profile` changed an old report's predictions and errors, and what
    MLflow was sent again."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    _profile_with_interference(db, 0.1, datetime(2025, 1, 1))
    before = json.loads(report("plan", "--format", "json").stdout)["groups"]
    _profile_with_interference(db, 0.9, datetime(2030, 1, 1))  # taken after the run
    assert json.loads(report("plan", "--format", "json").stdout)["groups"] == before
    assert {job["name"]: job.get("interference") for job in json.loads(report("plan", "--format", "json").stdout)[
        "jobs"] if job["mode"] == "sequential"} == {"a": pytest.approx(0.1), "b": pytest.approx(0.1)}


def test_a_profiles_run_is_reported_after_the_warm_up_its_profile_left_out(isolated_results):
    """`xover profile --warmup 3` of 15 iterations keeps 12 of them; its report cut 1 (the default for 15), so its
    medians were not the figures `profile` printed and stored."""
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="a", hash="h", path="a.toml", body={})
        session.add(recipe)
        session.add(Experiment(id="20260101-000000-prof", kind="profile", command="xover profile a", status="finished"))
        session.flush()
        run = Run(experiment_id="20260101-000000-prof", recipe_id=recipe.id, name="a", mode="profile",
                  hosts="localhost:2", np=2, status="finished", exit_code=0)
        session.add(run)
        session.flush()
        for step in range(15):  # each step 10 ms longer than the last: every cut has its own median
            session.add(IterationMetric(run_id=run.id, step=step, time_s=0.0, wall_time=1000.0 + step,
                                        iteration_s=0.01 * (step + 1), data_s=0.0, compute_s=0.005 * (step + 1),
                                        communication_s=0.005 * (step + 1), wait_s=0.0, samples=64, loss=1.0))
        session.add(Profile(recipe_id=recipe.id, recipe_hash="h", run_id=run.id, name="a", np=2, bandwidth="host",
                            hardware="x", iterations=12, data_ms=0.0, compute_ms=47.5, comm_ms=47.5,
                            iteration_ms=95.0, samples_per_s=64 / 0.095, memory_gb=0.1, gradient_bytes=1,
                            link_ms=None, comm_cpu_ms=None, checkpoints=None, spread={}))
    store.close()
    [job] = json.loads(report("prof", "--format", "json").stdout)["jobs"]
    assert job["iteration_ms"] == pytest.approx(95.0)  # steps 4-15, as the profile: 1-15 gave 85
    assert job["compute_ms"] == pytest.approx(47.5)
    assert job["samples_per_s"] == pytest.approx(64 * 12 / sum(0.01 * (step + 1) for step in range(3, 15)))


def test_a_renamed_jobs_run_is_compared_with_the_profile_it_reused(isolated_results):
    """A job file renamed after it was profiled is planned and run from the profile taken under its first name
    (store/profiles.py finds profiles by what a job computes); its report finds that profile too (by name alone it
    found none), and never a profile of another job (another batch), however new."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    store = open_store(str(db))
    body = {"model": "mlp", "dataset": "digits", "batch_size": 32, "optimizer": "sgd", "lr": 0.1, "np": 2, "seed": 1}
    with store.session() as session, session.begin():
        ran = RecipeSnapshot(name="a", hash="ha", path="a.toml", body={**body, "name": "a", "iterations": 10})
        profiled = RecipeSnapshot(name="first", hash="hf", path="first.toml",
                                  body={**body, "name": "first", "description": "as first named", "iterations": 200})
        other = RecipeSnapshot(name="c", hash="hc", path="c.toml", body={**body, "name": "c", "batch_size": 64})
        session.add_all([ran, profiled, other])
        session.flush()
        for run in session.scalars(select(Run).where(Run.name == "a")):
            run.recipe_id = ran.id
        for recipe, name, compute_ms in ((profiled, "first", 20.0), (other, "c", 5.0)):
            session.add(Profile(recipe_id=recipe.id, recipe_hash=recipe.hash, name=name, np=2, bandwidth="host",
                                hardware="x", iterations=10, data_ms=0.0, compute_ms=compute_ms, comm_ms=10.0,
                                iteration_ms=compute_ms + 10.0, samples_per_s=1.0, memory_gb=0.1, gradient_bytes=1,
                                link_ms=None, comm_cpu_ms=None, checkpoints=None, spread={},
                                created_at=datetime(2025, 1, 1)))
    store.close()
    [group] = json.loads(report("plan", "--format", "json").stdout)["groups"]
    assert group["alone_vs_profile"].get("a") == pytest.approx(1.5)  # 30 ms alone against the 20 ms of "first"
    assert group["alone_vs_profile"].get("b") is None  # b's recipe is neither


def test_train_experiment_shows_job_rows_only(isolated_results):
    _hand_made_store(isolated_results / "xover.db")
    result = report()  # latest: the train experiment, created last
    assert result.exit_code == 0, result.output
    assert "20260101-000100-solo" in result.output and "solo" in result.output
    assert "accuracy parity" not in result.output and "measured gain" not in result.output
    assert "losses:" in result.output and "timeline:" not in result.output
    summary = report("all", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(summary.stdout)))
    assert [r["id"] for r in rows] == ["20260101-000100-solo", "20260101-000000-plan"]  # newest first
    assert float(rows[1]["best_crossover_gain"]) == pytest.approx(2.0)


def _with_a_failed_job(db: Path) -> None:
    """Job b's sequential run of the plan's experiment failed (exit 1); xover itself ran to its end, so the
    experiment's row says finished, as `xover run` leaves it."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        run = session.scalars(select(Run).where(Run.name == "b", Run.mode == "sequential")).one()
        run.status, run.exit_code, run.error = "failed", 1, "RuntimeError: boom"
    store.close()


def test_an_experiment_with_a_failed_job_is_failed_in_every_view(isolated_results):
    """`report all` (table, JSON, CSV, HTML) and the experiment's own report said `finished` for a comparison
    whose job failed: the experiment's row says only that xover ran to its end."""
    _hand_made_store(isolated_results / "xover.db")
    _with_a_failed_job(isolated_results / "xover.db")
    listed = report("all", "--format", "json")
    assert listed.exit_code == 0, listed.output
    statuses = {row["id"]: row["status"] for row in json.loads(listed.stdout)["experiments"]}
    assert statuses == {"20260101-000000-plan": "failed", "20260101-000100-solo": "finished"}
    table = report("all")
    assert table.exit_code == 0, table.output
    [line] = [line for line in table.output.splitlines() if "20260101-000000-plan" in line]
    assert " failed " in line and "finished" not in line, line
    rows = list(csv.DictReader(io.StringIO(report("all", "--format", "csv").stdout)))
    assert [row["status"] for row in rows] == ["finished", "failed"]
    page = isolated_results / "all.html"
    assert report("all", "--format", "html", "--out", str(page)).exit_code == 0
    assert "<td>failed</td>" in page.read_text()
    one = report("20260101-000000-plan", "--format", "json")
    assert json.loads(one.stdout)["experiment"]["status"] == "failed"
    assert "(run, failed, " in report("20260101-000000-plan").output


def test_a_failed_runs_throughput_is_left_out_of_the_table_json_and_csv_alike(isolated_results):
    """The table showed '-' for b's failed run alone, while jobs.csv and the JSON kept its samples/s (and speed
    1.0): a run that did not finish is no measurement, in any view. Its iteration times stay."""
    _hand_made_store(isolated_results / "xover.db")
    _with_a_failed_job(isolated_results / "xover.db")
    [row] = [row for row in report(PLAN).output.splitlines() if "│ b " in row and "sequential" in row]
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[4] == "failed" and cells[7] == "-" and cells[12] == "-", row  # samples/s, slowdown
    rows = list(csv.DictReader(io.StringIO(report(PLAN, "--format", "csv").stdout)))
    [failed] = [r for r in rows if (r["name"], r["mode"]) == ("b", "sequential")]
    assert (failed["samples_per_s"], failed["samples_per_s_shared"], failed["speed"], failed["slowdown"]) == (
        "", "", "", "")
    assert float(failed["iteration_ms"]) == pytest.approx(40.0)
    [shown] = [j for j in json.loads(report(PLAN, "--format", "json").stdout)["jobs"]
               if (j["name"], j["mode"]) == ("b", "sequential")]
    assert shown["samples_per_s"] is None and shown["samples_per_s_shared"] is None and shown["speed"] is None
    [finished] = [r for r in rows if (r["name"], r["mode"]) == ("a", "sequential")]
    assert float(finished["samples_per_s"]) == pytest.approx(1600.0) and float(finished["speed"]) == 1.0


def _with_runs_not_started(db: Path) -> None:
    """The plan's experiment as a comparison in which b failed alone: its crossover runs and its concurrent runs
    were never started, and the scheduler said why (Recorder.record_not_started)."""
    _with_a_failed_job(db)
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for run in session.scalars(select(Run).where(Run.mode == "crossover")):
            session.query(IterationMetric).filter(IterationMetric.run_id == run.id).delete()
            session.delete(run)
        why = "b: failed alone (RuntimeError: boom)"
        for mode, policy in (("concurrent", None), ("crossover", "work-conserving")):
            session.add(TurnEvent(experiment_id=PLAN, group_index=0, host="localhost", kind="not-started",
                                  detail={"mode": mode, "policy": policy, "jobs": ["a", "b"], "why": why}))
    store.close()


def test_runs_not_started_after_a_failure_alone_are_said_in_every_view(isolated_results):
    """A comparison whose job failed alone starts none of its group's later modes: the report showed fewer rows
    and no reason. Now the table (under the jobs), the JSON (`not_started`) and the HTML page say which modes of
    which group were not started, and why."""
    _hand_made_store(isolated_results / "xover.db")
    _with_runs_not_started(isolated_results / "xover.db")
    said = ("group 0: not started: concurrent, crossover (work-conserving) - b: failed alone (RuntimeError: boom); "
            "each would have failed the same way")
    assert said in " ".join(report(PLAN).output.split())
    data = json.loads(report(PLAN, "--format", "json").stdout)
    assert [job["mode"] for job in data["jobs"]] == ["sequential", "sequential"]
    assert data["not_started"] == [
        {"group": 0, "mode": "concurrent", "policy": None, "jobs": ["a", "b"],
         "why": "b: failed alone (RuntimeError: boom)", "stopped_first": False},
        {"group": 0, "mode": "crossover", "policy": "work-conserving", "jobs": ["a", "b"],
         "why": "b: failed alone (RuntimeError: boom)", "stopped_first": False},
    ]
    page = isolated_results / "r.html"
    assert report(PLAN, "--format", "html", "--out", str(page)).exit_code == 0
    assert f"<p>{said}</p>" in page.read_text()
    # an experiment that started every run says nothing of the kind, and its JSON's list is empty
    solo = json.loads(report("20260101-000100-solo", "--format", "json").stdout)
    assert solo["not_started"] == [] and "not started" not in report("20260101-000100-solo").output


def _caption(page: Path, name: str) -> str:
    return page.read_text().split(f'<figure id="{name}">')[1].split("<figcaption>")[1].split("</figcaption>")[0]


def test_the_loss_pictures_caption_says_what_ran(isolated_results):
    """The HTML page's losses caption said "alone and under crossover" whatever ran: a comparison of sequential
    and concurrent only, or a training run, ran no crossover."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    page = isolated_results / "r.html"
    assert report(PLAN, "--format", "html", "--out", str(page)).exit_code == 0
    assert _caption(page, "losses").startswith("Training loss per iteration of each job alone and under crossover:")
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for run in session.scalars(select(Run).where(Run.mode == "crossover")):
            run.mode, run.slot = "concurrent", None
    store.close()
    assert report(PLAN, "--format", "html", "--out", str(page)).exit_code == 0
    caption = _caption(page, "losses")
    assert "crossover" not in caption.replace("(crossover or adaptive)", ""), caption
    assert caption.startswith("Training loss per iteration of each job alone (sequential); no run of this "
                              "experiment took turns"), caption
    assert "concurrent runs are not drawn" in caption
    assert report("20260101-000100-solo", "--format", "html", "--out", str(page)).exit_code == 0
    assert _caption(page, "losses") == "Training loss per iteration of each job alone (solo)."


SIGNALLED_IN = """
import importlib, signal, sys
module, name = sys.argv[1].rsplit(".", 1)

def signalled(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)
    raise AssertionError("the report went on after SIGTERM")

setattr(importlib.import_module(module), name, signalled)
from xover.cli import app
from xover.report.tables import turn_rows
app(args=sys.argv[2:], prog_name="xover")
"""


@pytest.mark.parametrize(("where", "args", "said"), [
    ("xover.report.tables.print_summary_table", ["report", "all"],
     "interrupted: the report stopped part-way; each file it said it wrote is whole, one it was writing may not be"),
    ("xover.report.mlflow.write_experiment", ["report", "all", "--format", "mlflow", "--tracking-uri",
                                              "sqlite:///mlflow.db"],
     "interrupted: the MLflow write stopped part-way; an experiment cut short there is replaced when written again"),
], ids=["table", "mlflow"])
def test_sigterm_during_a_report_is_said_in_one_line(isolated_results, where, args, said):
    """SIGTERM ended `xover report` with exit 143 and not a word; now it is Ctrl-C's: one line, exit 130."""
    import subprocess
    import sys

    _hand_made_store(isolated_results / "xover.db")
    if "--tracking-uri" in args:
        args[-1] = f"sqlite:///{isolated_results / 'mlflow.db'}"
    result = subprocess.run([sys.executable, "-c", SIGNALLED_IN, where, *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [said], result.stderr
    assert report("all").exit_code == 0  # the store reads as before


# ------------------------------------------------------------------------------ errors


def _one_error_line(result, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error:")
    for text in expected:
        assert text in line, line


def test_missing_or_empty_database_and_unknown_id_exit_2(isolated_results):
    _one_error_line(report(), "no database at", "xover train")
    assert not (isolated_results / "xover.db").exists()  # reporting creates no database
    open_store(str(isolated_results / "xover.db")).close()
    _one_error_line(report(), "holds no experiments yet")
    _one_error_line(report("all"), "holds no experiments yet")
    _hand_made_store(isolated_results / "other.db")
    _one_error_line(runner.invoke(app, ["--db", str(isolated_results / "other.db"), "report", "nothing-like-this"]),
                    "no experiment 'nothing-like-this'", f"`xover --db {isolated_results / 'other.db'} report all`")
    _one_error_line(runner.invoke(app, ["--db", str(isolated_results / "other.db"), "report", "2026"]),
                    "matches 2 experiments")
    # an end of fewer than 4 characters is no id: `report o` reported whichever id ended in 'o'
    other = ["--db", str(isolated_results / "other.db"), "report"]
    _one_error_line(runner.invoke(app, [*other, "lo"]), "no experiment 'lo'")
    assert "20260101-000100-solo" in runner.invoke(app, [*other, "solo", "--format", "json"]).output


def test_a_sqlite_url_with_options_reports_the_file_it_names(isolated_results):
    """SQLite's URI form (`sqlite:///file:PATH?mode=ro&uri=true`) names PATH, which exists, and a store made
    read-only (chmod 444) is reported without a byte written. Before: "no database at PATH?mode=ro: nothing has
    been run yet" - the query was taken as part of the file's name."""
    import hashlib

    db = isolated_results / "other.db"
    _hand_made_store(db)
    db.chmod(0o444)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for url in (f"sqlite:///file:{db}?mode=ro&uri=true", f"sqlite:///file:{db}?uri=true&immutable=1"):
        result = runner.invoke(app, ["--db", url, "report", "all", "--format", "json"])
        assert result.exit_code == 0, (url, result.output)
        assert len(json.loads(result.stdout)["experiments"]) == 2, result.stdout
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    gone = isolated_results / "gone.db"
    _one_error_line(runner.invoke(app, ["--db", f"sqlite:///file:{gone}?mode=ro&uri=true", "report"]),
                    f"no database at {gone}:")


def test_sqlite_options_without_uri_true_are_refused_in_one_line_naming_the_uri_form(isolated_results):
    """`sqlite:///a.db?mode=ro` printed SQLAlchemy's raw SAWarning ('Query string argument(s) 'mode' are not accepted
    by the pysqlite driver'), with its source line, and opened a.db to read and write: mode=ro was dropped (a probe
    session, 2026-12-07)."""
    import warnings

    db = isolated_results / "other.db"
    _hand_made_store(db)
    for url, form in ((f"sqlite:///{db}?mode=ro", f"sqlite:///file:{db}?mode=ro&uri=true"),
                      (f"sqlite:///file:{db}?mode=ro&uri=false", f"sqlite:///file:{db}?mode=ro&uri=true"),
                      (f"sqlite+pysqlite:///{db}?timeout=5&cache=shared",
                       f"sqlite+pysqlite:///file:{db}?timeout=5&cache=shared&uri=true")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # SQLAlchemy's warning, printed raw before
            result = runner.invoke(app, ["--db", url, "report", "all"])
        _one_error_line(result, f"the database {url}: SQLite reads ", "only in a URI (uri=true)", f"write {form}")
    # a password in such a URL's options is not shown, in the form to write either
    result = runner.invoke(app, ["--db", f"sqlite:///{db}?password=s3cr3t-Q1", "report", "all"])
    _one_error_line(result, "SQLite reads password only in a URI")
    assert "s3cr3t-Q1" not in result.output


@pytest.mark.parametrize("options", ["cache=shared&uri=true", "mode=ro&uri=true", "immutable=1&uri=true"])
def test_uri_true_without_file_is_refused_not_a_new_store_made_by_its_whole_name(isolated_results, monkeypatch,
                                                                                   options):
    """`--db 'sqlite:///store.db?cache=shared&uri=true' report` beside a store with experiments made and migrated a
    new store named `store.db?cache=shared` (SQLite reads a URI only after file:, and takes the rest as a file's
    name) and said it held no experiments yet; `?mode=ro&uri=true` made one too (a probe session, 2026-12-07)."""
    folder = isolated_results / "here"
    folder.mkdir()
    _hand_made_store(folder / "store.db")
    monkeypatch.chdir(folder)
    before = sorted(path.name for path in folder.iterdir())
    url = f"sqlite:///store.db?{options}"
    for command in (["report", "all"], ["report"]):
        _one_error_line(runner.invoke(app, ["--db", url, *command]),
                        f"the database {url}: with uri=true SQLite reads a name as a URI only where it starts with file:",
                        f"would open a file named store.db?{options.removesuffix('&uri=true')}: "
                        f"write sqlite:///file:store.db?{options}")
    assert sorted(path.name for path in folder.iterdir()) == before
    # as written so, it is the store there
    result = runner.invoke(app, ["--db", f"sqlite:///file:store.db?{options}", "report", "all", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["experiments"]) == 2, result.stdout


def test_a_read_only_uri_leaves_no_lock_and_a_uris_lock_is_beside_its_file(isolated_results, monkeypatch):
    """`sqlite:///file:a.db?mode=ro&uri=true` left `file:a.db.migrate.lock` in the working folder: the lock was named
    after the URL's name, not the file SQLite opened (a probe session, 2026-12-07). A read-only opening upgrades
    nothing and takes no lock; one that writes takes it beside the file."""
    folder = isolated_results / "here"
    folder.mkdir()
    _hand_made_store(folder / "a.db")
    (folder / "a.db.migrate.lock").unlink(missing_ok=True)
    monkeypatch.chdir(folder)
    assert runner.invoke(app, ["--db", "sqlite:///file:a.db?mode=ro&uri=true", "report", "all"]).exit_code == 0
    assert not [path.name for path in folder.iterdir() if path.name.endswith(".migrate.lock")]
    assert runner.invoke(app, ["--db", "sqlite:///file:a.db?uri=true", "report", "all"]).exit_code == 0
    assert [path.name for path in folder.iterdir() if path.name.endswith(".migrate.lock")] == ["a.db.migrate.lock"]


def test_a_store_in_the_rollback_journal_is_read_through_a_read_only_uri(isolated_results):
    """A store kept in SQLite's rollback journal (as xover keeps one on a network filesystem), given as
    `sqlite:///file:PATH?mode=ro&uri=true`: "attempt to write a readonly database" - each connection was switched
    to WAL first, a write."""
    db = isolated_results / "other.db"
    _hand_made_store(db)
    with closing(sqlite3.connect(db)) as connection:
        assert connection.execute("pragma journal_mode=delete").fetchone() == ("delete",)
    result = runner.invoke(app, ["--db", f"sqlite:///file:{db}?mode=ro&uri=true", "report", "all", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["experiments"]) == 2, result.stdout


@pytest.mark.parametrize("url", ["sqlite:///file::memory:?uri=true", "sqlite:///file:x.db?mode=memory&uri=true",
                                 "sqlite:///file:?uri=true"])
def test_a_uri_in_memory_is_refused_as_sqlite_memory_is(isolated_results, url):
    _one_error_line(runner.invoke(app, ["--db", url, "report", "all"]), "a database in memory keeps nothing")


def test_a_file_that_is_not_sqlite_whose_size_says_0_is_said_not_to_be_a_database(isolated_results):
    """`--db /proc/self/status` said "is an empty file": procfs gives its files a size of 0 (a probe session,
    2026-12-07). The file's first bytes tell."""
    _one_error_line(runner.invoke(app, ["--db", "/proc/self/status", "report", "all"]),
                    "the database /proc/self/status is not a database: the file does not begin as SQLite's files do")


def test_bad_format_and_out_exit_2():
    _one_error_line(report("--format", "xml"), "--format xml", "table, json, csv, html")
    _one_error_line(report("--out", "x.txt"), "--out")


# ------------------------------------------------------------------------------ every file a report writes

PLAN = "20260101-000000-plan"
REPLAY = ROOT / "tests" / "assets" / "replay"


def _experiments_in(db: Path) -> int:
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("select count(*) from experiments").fetchone()[0]


def test_no_file_a_report_writes_is_the_store(isolated_results):
    """`report --format csv --out DIR/r.csv` writes r.csv and r-iterations.csv beside it (a simulation's:
    r-jobs.csv and r-utilisation.csv), and every format but csv draws its pictures into results/runs/<id>/.
    Only --out itself was checked against the store: a store at a derived name (or a link to it there) was
    replaced by CSV text, exit 0, every experiment lost. Now every file is checked before the first is written."""
    folder = isolated_results / "out"
    folder.mkdir()
    store = folder / "r-iterations.csv"
    _hand_made_store(store)

    def xover(*args: str):
        return runner.invoke(app, ["--db", str(store), "report", *args])

    out = folder / "r.csv"
    _one_error_line(xover(PLAN, "--format", "csv", "--out", str(out)),
                    f"--out {out}: it writes {store} too, which is the store {store}", "choose another path")
    (folder / "q-iterations.csv").symlink_to(store)
    _one_error_line(xover(PLAN, "--format", "csv", "--out", str(folder / "q.csv")),
                    f"it writes {folder / 'q-iterations.csv'} too, which is the store {store}")
    (folder / "experiments.csv").symlink_to(store)
    _one_error_line(xover("all", "--format", "csv", "--out", str(folder)),
                    f"it writes {folder / 'experiments.csv'} too, which is the store {store}")
    pictures = isolated_results / "results" / "runs" / PLAN
    pictures.mkdir(parents=True)
    (pictures / "timeline.png").symlink_to(store)
    for fmt in ("table", "json", "html"):
        _one_error_line(xover(PLAN, "--format", fmt), f"{pictures / 'timeline.png'}: xover writes there, and it is the store {store}")
    mlflow_store = isolated_results / "mlflow.db"
    _one_error_line(xover(PLAN, "--format", "mlflow", "--tracking-uri", f"sqlite:///{mlflow_store}"),
                    f"{pictures / 'timeline.png'}: xover writes there, and it is the store {store}")
    assert not mlflow_store.exists()
    assert _experiments_in(store) == 2
    assert not out.exists() and not (folder / "q.csv").exists()
    assert sorted(path.name for path in pictures.iterdir()) == ["timeline.png"]

    # a file of the user's at a derived name is replaced, and said so, as every file written is
    (folder / "mine-iterations.csv").write_text("mine\n")
    written = xover(PLAN, "--format", "csv", "--out", str(folder / "mine.csv"))
    assert written.exit_code == 0, written.output
    assert written.output.splitlines() == [f"wrote {folder / 'mine.csv'}", f"wrote {folder / 'mine-iterations.csv'}"]
    assert (folder / "mine-iterations.csv").read_text().startswith("experiment,run_id")


def test_no_file_a_simulations_report_writes_is_the_store(isolated_results):
    """A simulation's `--format csv --out DIR/r.csv` wrote r-jobs.csv and r-utilisation.csv too: a store named
    r-jobs.csv was replaced by the jobs' CSV (the issue's repro)."""
    folder = isolated_results / "out"
    folder.mkdir()
    store = folder / "r-jobs.csv"
    simulated = runner.invoke(app, ["--db", str(store), "simulate", str(REPLAY / "fifo_srtf.csv"), "--profiles",
                                    str(REPLAY / "profiles.csv"), "--cluster", "1x2", "--policy", "fifo"])
    assert simulated.exit_code == 0, simulated.output
    (folder / "s-utilisation.csv").symlink_to(store)
    for name, derived in (("r.csv", store), ("s.csv", folder / "s-utilisation.csv")):
        result = runner.invoke(app, ["--db", str(store), "report", "latest", "--format", "csv",
                                     "--out", str(folder / name)])
        _one_error_line(result, f"--out {folder / name}: it writes {derived} too, which is the store {store}")
    assert _experiments_in(store) == 1
    assert not (folder / "r.csv").exists() and not (folder / "s.csv").exists()


def test_an_output_that_is_a_pipe_is_refused_not_waited_on(isolated_results):
    """`report --format json --out FIFO` (and `plan --out FIFO`) blocked for ever opening the pipe, waiting for
    a reader. Now an output that is neither a regular file nor a folder is one line, exit 2; so is a pipe at a
    file --out makes the report write (FILE-iterations.csv beside FILE.csv, report.json in a folder)."""
    _hand_made_store(isolated_results / "xover.db")
    folder = isolated_results / "out"
    folder.mkdir()
    fifo, derived, inside = isolated_results / "fifo", folder / "r-iterations.csv", folder / "report.json"
    readers = []
    for pipe in (fifo, derived, inside):
        os.mkfifo(pipe)
        # a reader: a write that got there would not block (the test cannot hang), and would be read below
        readers.append(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
    try:
        _one_error_line(report(PLAN, "--format", "json", "--out", str(fifo)),
                        f"--out {fifo}: not a regular file or a folder")
        _one_error_line(report(PLAN, "--format", "csv", "--out", str(fifo)), f"--out {fifo}: not a regular file")
        _one_error_line(report(PLAN, "--format", "csv", "--out", str(folder / "r.csv")),
                        f"it writes {derived} too, which is not a regular file")
        _one_error_line(report(PLAN, "--format", "json", "--out", str(folder)),
                        f"it writes {inside} too, which is not a regular file")
        trace = isolated_results / "t.csv"
        trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
        _one_error_line(runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(fifo)]),
                        f"--out {fifo}: not a regular file or a folder")
        assert [os.read(reader, 1) for reader in readers] == [b"", b"", b""]  # nothing was written into a pipe
    finally:
        for reader in readers:
            os.close(reader)
    assert sorted(path.name for path in folder.iterdir()) == ["r-iterations.csv", "report.json"]


# ------------------------------------------------------------------------------ the timeline's arithmetic


@pytest.mark.parametrize("target", ["all", "latest", "nosuchexperiment"])
def test_an_empty_store_is_named_without_its_password(isolated_results, monkeypatch, target):
    import xover.report as reporting

    store = open_store(str(isolated_results / "empty.db"))
    store.url = "postgresql://xover:s3cret-pw@db.example:5432/xover"  # as a PostgreSQL store would be named
    monkeypatch.setattr(reporting, "open_existing_store", lambda db: store)
    with pytest.raises(reporting.ReportError) as refused:
        reporting.make_report(None, target, "table", None)
    assert "s3cret-pw" not in str(refused.value)
    assert "postgresql://xover:***@db.example:5432/xover" in str(refused.value)


def test_mlflow_of_a_store_of_simulations_only_says_so(isolated_results):
    """`report all --format mlflow` said the store held no experiments where it held simulations."""
    from typer.testing import CliRunner

    from xover.cli import app

    replay = Path(__file__).resolve().parents[1] / "assets" / "replay"
    runner = CliRunner()
    stored = runner.invoke(app, ["simulate", str(replay / "pair.csv"), "--profiles", str(replay / "profiles.csv"),
                                 "--cluster", "1x2", "--policy", "fifo"])
    assert stored.exit_code == 0, stored.output
    result = runner.invoke(app, ["report", "all", "--format", "mlflow", "--tracking-uri", "http://127.0.0.1:1"])
    assert result.exit_code == 2 and "holds only simulations (1), which have no runs for MLflow" in result.output, (
        result.output)


def test_an_empty_experiment_id_is_refused_not_read_as_the_start_of_every_id(isolated_results):
    from typer.testing import CliRunner

    from xover.cli import app

    replay = Path(__file__).resolve().parents[1] / "assets" / "replay"
    runner = CliRunner()
    for _ in range(2):
        stored = runner.invoke(app, ["simulate", str(replay / "pair.csv"), "--profiles", str(replay / "profiles.csv"),
                                     "--cluster", "1x2", "--policy", "fifo"])
        assert stored.exit_code == 0, stored.output
    for target in ("", " "):
        result = runner.invoke(app, ["report", target])
        assert result.exit_code == 2 and "no experiment named: give an id" in result.output, result.output


@pytest.mark.parametrize("command, advice", [
    ("xover run plan.json", "give the faster job more iterations, or use --seconds)"),
    ("xover run plan.json --seconds 30", "--seconds gave each job the iterations it does in that time alone"),
    ("xover run plan.json --seconds=30", "--seconds gave each job the iterations it does in that time alone"),
    ("xover run --script a.py --script b.py -- --seconds 30", "or use --seconds)"),  # the scripts' own argument
])
def test_the_short_overlap_warning_advises_what_the_run_was_not_given(isolated_results, command, advice):
    """A run given --seconds whose jobs ran together for a short share of it was told "... or use --seconds"."""
    db = isolated_results / "xover.db"
    _hand_made_store(db)
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE experiments SET command = ? WHERE id = '20260101-000000-plan'", (command,))
        b_crossover = "SELECT id FROM runs WHERE name = 'b' AND mode = 'crossover'"
        connection.execute(f"UPDATE iteration_metrics SET wall_time = wall_time + 0.3 WHERE run_id IN ({b_crossover})")
    output = " ".join(report("plan").output.split())  # the table wraps long lines
    assert "group 0: the crossover (round-robin) jobs ran at the same time for only 9% of that run" in output, output
    assert advice in output, output
    if "--seconds " in command.split(" -- ")[0] or "--seconds=" in command:
        assert "or use --seconds" not in output, output


def test_a_report_of_an_experiment_without_groups_draws_no_picture_of_other_experiments_gains(isolated_results):
    """A run that left no job (killed while it waited for its devices) had the store's predicted-against-measured
    picture drawn into its folder: other experiments' points only."""
    _hand_made_store(isolated_results / "xover.db")
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        session.add(Experiment(id="20260101-000200-none", kind="run", command="xover run plan.json", status="lost"))
    store.close()
    result = report("none")
    assert result.exit_code == 0, result.output
    assert "predicted_vs_measured" not in result.output
    assert "predicted_vs_measured" in report("plan").output  # one with a group of its own has it


def test_an_end_of_an_id_too_short_to_name_one_says_so(isolated_results):
    """`report 85`, ids ending in 85: "no experiment '85'", though a start of one said how many it matched."""
    _hand_made_store(isolated_results / "xover.db")
    _one_error_line(report("an"), "no experiment 'an' in", "an id's end names one from 4 characters on, and ids end "
                    "in 'an': give more of it")
    assert "give more" not in report("zz").output


def test_an_unknown_experiment_with_a_newline_is_named_on_one_line(isolated_results):
    """`xover report $'la\\ntest'` printed "no experiment 'la" and "test' in ..." on two lines."""
    _hand_made_store(isolated_results / "xover.db")
    result = report("la\ntest")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: no experiment 'la\\ntest' in {isolated_results / 'xover.db'}: `xover report all` lists the experiments"
    ], result.output


def test_an_experiment_whose_runs_all_failed_shows_no_tables_of_dashes(isolated_results):
    """Every run of the comparison failed: its tables of groups and of ways of sharing were rows of dashes under
    the failures (the terminal and the HTML alike); they are left out, the jobs, failures and turns kept (these
    runs failed after their tenth iteration: their turns were measured). A crossover run with no turn measured
    is no row of turns either."""
    _hand_made_store(isolated_results / "xover.db")
    store = open_store(str(isolated_results / "xover.db"))
    with store.session() as session, session.begin():
        for run in session.scalars(select(Run).where(Run.experiment_id == "20260101-000000-plan")):
            run.status, run.exit_code, run.error = "failed", 1, "RuntimeError: boom"
    store.close()
    shown = report("20260101-000000-plan")
    assert shown.exit_code == 0, shown.output
    assert "RuntimeError: boom" in shown.output, shown.output
    for title in ("aggregate throughput", "each way of sharing"):
        assert title not in shown.output, shown.output
    assert "turns under crossover" in shown.output
    page = isolated_results / "failed.html"
    assert report("20260101-000000-plan", "--format", "html", "--out", str(page)).exit_code == 0
    assert "Groups: aggregate" not in page.read_text() and "Ways of sharing" not in page.read_text()
    unmeasured = {"mode": "crossover", "wait_ms": None, "wait_p90_ms": None, "yields": None, "skew_p50_ms": None,
                  "skew_p90_ms": None}
    assert turn_rows([unmeasured, {**unmeasured, "wait_ms": 0.0}]) == [{**unmeasured, "wait_ms": 0.0}]


def test_the_plan_of_a_run_given_by_a_relative_path_is_not_written_over(isolated_results, tmp_path, monkeypatch):
    """`xover run t/plan.json`, then `report --format html --out t/plan.json` from the same folder wrote the page
    over the plan (the probe's F7, 2026-12-07): the plan's path was kept as typed, and a relative path in the
    store could not be told from another file. It is kept whole now, and the report refused."""
    from xover.plan.step import plan_jobs
    from xover.store.models import Experiment
    from xover.store.models import Plan as PlanRow

    monkeypatch.chdir(tmp_path)
    Path("t").mkdir()
    Path("jobs.csv").write_text("name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,1,2,8,0.1\nresnet-digits,1,30,5,0.1\n")
    db = str(isolated_results / "xover.db")
    plan_jobs(db, recipe_paths=[], trace_csv="jobs.csv", devices=1, hosts=None, device_memory_gb=None, max_group=2,
              algo="matching", out="t/plan.json")
    store = open_store(db)
    with store.session() as session, session.begin():
        [row] = session.scalars(select(PlanRow)).all()
        assert row.path == str(tmp_path / "t" / "plan.json")
        session.add(Experiment(id="20261207-140000-f7f7", kind="run", command="xover run t/plan.json",
                               status="finished", plan_id=row.id))
    store.close()
    before = Path("t/plan.json").read_text()
    refused = runner.invoke(app, ["report", "latest", "--format", "html", "--out", "t/plan.json"])
    assert refused.exit_code == 2, refused.output
    assert "that is the plan of experiment 20261207-140000-f7f7; writing there would destroy it" in refused.output
    assert Path("t/plan.json").read_text() == before


def test_a_job_of_the_longest_name_leaves_the_pictures_room(isolated_results):
    """A job name of 200 characters (allowed) squeezed the loss picture into a sliver beside its legend, and every
    report of it printed matplotlib's "constrained_layout not applied" (helper-90's probe, 2026-12-07)."""
    import warnings

    db = isolated_results / "xover.db"
    _hand_made_store(db)
    long_name = "a" * 190 + "-long#2"
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for run in session.scalars(select(Run).where(Run.name == "b")):
            run.name = long_name
    store.close()
    page = isolated_results / "r.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a layout matplotlib cannot make is a warning: here, a failure
        result = report(PLAN, "--format", "html", "--out", str(page))
    assert result.exit_code == 0, result.output
    pictures = sorted(path.name for path in page.parent.glob("r_files/*.png")) or sorted(
        path.name for path in page.parent.rglob("*.png"))
    assert "losses.png" in pictures, pictures
