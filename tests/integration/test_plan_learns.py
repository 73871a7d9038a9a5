"""Plans learn from what ran: a comparison's measured aggregates go into the store (run/learn.py) and the next
plan of the same jobs uses them instead of its simulation, marked measured (plan/step.py, plan/measured.py);
a measurement of other jobs (a changed recipe), another link, other hardware or other settings is never used. The store and
the planner are real; the comparison is written as `xover run` writes one (its figures made up)."""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from xover.cli import app
from xover.devices import hardware_fingerprint
from xover.errors import XoverError
from xover.links import Link
from xover.plan.make import local_hosts
from xover.plan.measured import JobIdentity, in_key_order, jobs_key
from xover.plan.step import measurements_of, plan_jobs
from xover.recipes import load_recipe, with_overrides
from xover.results import GroupComparison, PolicyResult, RunResult
from xover.run.adaptive import AdaptiveSettings
from xover.run.jobs import GroupToRun, job_for, unique_names
from xover.run.learn import learn_measurements
from xover.run.targets import groups_from_plan
from xover.run.traits import predict_unplanned, stored_profile
from xover.run.units import group_units, measured_before
from xover.store.measured import add_measurement, recent_measurements
from xover.store.models import Experiment, Profile, SharingMeasurement
from xover.store.queries import snapshot_recipe
from xover.store.session import open_store
from xover.turns.protocol import FREE, TURNS

PAIR = ("mlp-digits", "resnet-digits")
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _profiles(db, link="1gbit", hardware=None, tuning=None, jobs=None, keyed="job_hash"):
    """Stored profiles of the pair (or of `jobs`: (recipe, compute ms, comm ms)), as `xover profile` keeps them
    (the figures made up): under each recipe's `keyed` (`hash`: as before 2026-12-02, its name in its key);
    `tuning` None as before the settings that change a job alone were kept."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for recipe, compute_ms, comm_ms in jobs or ((load_recipe("mlp-digits"), 5.0, 60.0),
                                                   (load_recipe("resnet-digits"), 60.0, 8.0)):
            name = recipe.name
            snapshot = snapshot_recipe(session, recipe)
            session.add(Profile(recipe_id=snapshot.id, recipe_hash=getattr(recipe, keyed), name=name, np=recipe.np,
                                engine="horovod", bandwidth=link, hardware=hardware or hardware_fingerprint(),
                                iterations=20, data_ms=0.0, compute_ms=compute_ms, comm_ms=comm_ms,
                                iteration_ms=compute_ms + comm_ms, samples_per_s=100.0, memory_gb=0.1,
                                gradient_bytes=1000, link_ms=comm_ms, comm_cpu_ms=None, checkpoints=10, spread={},
                                tuning=tuning))
    store.close()


def _compared(db, experiment="e1", link="1gbit", recipes=PAIR, crossover=1.35, concurrent=1.52, adaptive=1.50,
              overlap=0.9, window_s=10.0, iteration_ms=None):
    """A comparison of the pair, learnt as `xover run` learns it after comparing: every way over `window_s`
    of steady iterations, `overlap` of its run; each run's iteration `iteration_ms`."""
    store = open_store(str(db))
    with store.session() as session, session.begin():
        session.add(Experiment(id=experiment, kind="run", command="xover run", status="finished"))
    jobs = unique_names([job_for(recipe if not isinstance(recipe, str) else load_recipe(recipe)) for recipe in recipes])
    group = GroupToRun(0, jobs)
    speeds = {"crossover": (0.6, crossover - 0.6), "concurrent": (0.7, concurrent - 0.7), "adaptive": (0.7, adaptive - 0.7)}
    results = [RunResult(name=job.name, mode=mode, group=0, policy="work-conserving" if mode != "concurrent" else None,
                         speed=speeds[mode][slot], iteration_ms=iteration_ms)
               for mode in speeds for slot, job in enumerate(jobs)]
    ways = ("crossover", "concurrent", "adaptive")
    comparison = GroupComparison(
        group=0, jobs=[job.name for job in jobs],
        policies={"work-conserving": PolicyResult(aggregate=crossover, window_s=window_s, overlap=overlap)},
        sequential=1.0, measured={"crossover": crossover, "concurrent": concurrent, "adaptive": adaptive},
        overlaps=dict.fromkeys(ways, overlap), crossover_policy="work-conserving",
        windows=dict.fromkeys(ways, window_s), starts_apart={})
    kept = learn_measurements(store, experiment, [group], results, [comparison], Link.of_key(link))
    store.close()
    return kept


def _plan(db, tmp_path, link="1gbit"):
    written = plan_jobs(str(db), recipe_paths=list(PAIR), trace_csv=None, devices=2, hosts=None,
                        device_memory_gb=None, max_group=2, algo="matching", out=str(tmp_path / "plan.json"),
                        link=Link.parse(link))
    [group] = written.plan.groups
    return group


def test_the_next_plan_of_the_same_jobs_uses_what_they_measured(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    _profiles(db)
    simulated = _plan(db, tmp_path)
    assert set(simulated.predicted_from.values()) == {"simulated"}
    assert _compared(db) == 3  # crossover (work-conserving), concurrent, adaptive
    learnt = _plan(db, tmp_path)
    assert learnt.predicted_by_sharing["crossover"] == pytest.approx(1.35)
    assert learnt.predicted_by_sharing["concurrent"] == pytest.approx(1.52)
    assert learnt.predicted_from["crossover"] == learnt.predicted_from["concurrent"] == "measured"
    # both measured, 11% apart: more than a measurement's error, so concurrent, and the plan says why
    assert learnt.sharing == "concurrent"
    assert "crossover 1.35 (measured), concurrent 1.52 (measured)" in learnt.sharing_reason
    assert "the measurements' error (4.0%)" in learnt.sharing_reason
    assert learnt.predicted_speed == {"mlp-digits": pytest.approx(0.7), "resnet-digits": pytest.approx(0.82)}
    # the plan file and `xover plan`'s table say so too
    body = json.loads((tmp_path / "plan.json").read_text())
    assert body["groups"][0]["predicted_from"]["concurrent"] == "measured"
    shown = runner.invoke(app, ["plan", *PAIR, "--devices", "2", "--bandwidth", "1gbit",
                                "--out", str(tmp_path / "again.json")])
    assert shown.exit_code == 0, shown.output
    assert "concurrent 1.52*" in " ".join(shown.output.split())


def test_a_short_overlap_is_learnt_where_its_window_held_twenty_of_the_slowest_jobs_iterations(isolated_results):
    """A job with a long start-up beside a quick one (ddp-digits loads its data for ten seconds) runs together
    with it for a third of the run, yet for a window of steady iterations: kept where that window holds 20 of
    the slowest job's iterations (here 476 ms each: 9.6 s), not where it holds fewer, nor where the jobs never
    ran together past warm-up (no window: whole runs compared)."""
    db = isolated_results / "xover.db"
    _profiles(db)
    assert _compared(db, "long", overlap=0.33, window_s=12.0, iteration_ms=476.0) == 3
    assert _compared(db, "short", overlap=0.33, window_s=9.0, iteration_ms=476.0) == 0
    assert _compared(db, "apart", overlap=0.0, window_s=None, iteration_ms=476.0) == 0
    assert _compared(db, "half", overlap=0.5, window_s=2.0, iteration_ms=476.0) == 3  # half of its run: kept
    store = open_store(str(db))
    with store.session() as session:
        kept = session.query(SharingMeasurement).all()
        assert {row.experiment_id for row in kept} == {"long", "half"}
        # each with its window, by which it weighs in the mean a plan reads
        assert sorted({row.window_s for row in kept}) == [2.0, 12.0]
    store.close()


def test_a_comparison_whose_run_alone_was_slowed_is_not_learnt_nor_an_older_one_planned_with(isolated_results, tmp_path):
    """A job faster next to others than alone (by more than noise) says its run alone was slowed: every way of
    that comparison reads high (a pair measured at 3.00 concurrent, above the two jobs' 2.00; the probe's
    F1, 2026-12-07). It is not kept; a row of one kept by an older xover is passed over by the plan."""
    db = isolated_results / "xover.db"
    _profiles(db)
    assert _compared(db, "clean", crossover=1.50, concurrent=1.30) == 3
    assert _compared(db, "slowed", crossover=1.35, concurrent=3.00) == 0  # concurrent's second job at 2.30x
    store = open_store(str(db))
    with store.session() as session, session.begin():
        assert {row.experiment_id for row in session.query(SharingMeasurement)} == {"clean"}
        session.add(Experiment(id="older", kind="run", command="xover run", status="finished"))
        [clean] = session.query(SharingMeasurement).filter_by(way="concurrent").all()
        session.add(SharingMeasurement(**{column: getattr(clean, column) for column in (
            "group_index", "jobs_key", "jobs", "link", "hardware", "tuning", "way", "policy", "window_s")},
            experiment_id="older", gain=3.0, speeds=[0.7, 2.3]))
    store.close()
    learnt = _plan(db, tmp_path)
    assert learnt.predicted_by_sharing["concurrent"] == pytest.approx(1.30)  # the clean comparison's alone
    assert learnt.predicted_by_sharing["crossover"] == pytest.approx(1.50)
    assert learnt.sharing != "concurrent"


def test_a_way_is_planned_at_the_mean_of_its_newest_three_measurements(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    _profiles(db)
    for number, (crossover, concurrent) in enumerate([(1.0, 1.9), (1.30, 1.55), (1.40, 1.50), (1.50, 1.45)]):
        _compared(db, experiment=f"e{number}", crossover=crossover, concurrent=concurrent)
    learnt = _plan(db, tmp_path)  # the oldest (1.0, 1.9) is out: one comparison's figure moves from the next
    assert learnt.predicted_by_sharing["crossover"] == pytest.approx(1.40)
    assert learnt.predicted_by_sharing["concurrent"] == pytest.approx(1.50)
    assert learnt.predicted_from["crossover"] == "measured"
    store = open_store(str(db))
    rows = recent_measurements(store, "1gbit")
    store.close()
    crossover = next(row for row in rows if row["way"] == "crossover")
    assert crossover["measurements"] == 3 and crossover["experiment"] == "e3"
    assert crossover["speeds"] == pytest.approx([0.6, 0.8])


def test_close_measurements_make_the_plan_adaptive(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    _profiles(db)
    _compared(db, crossover=1.50, concurrent=1.52, adaptive=1.55)
    group = _plan(db, tmp_path)
    assert group.sharing == "adaptive" and "adaptive measures both" in group.sharing_reason
    # adaptive ran on these jobs: its own measurement is its prediction
    assert group.predicted_gain == pytest.approx(1.55) and group.predicted_from["adaptive"] == "measured"


def _unplanned(store):
    """The pair as `xover run --group A B --mode adaptive` (no plan) predicts it, and its adaptive unit."""
    group = GroupToRun(0, [job_for(load_recipe(name)) for name in PAIR])
    predict_unplanned(store, group, Link.parse("1gbit"), "work-conserving", ["adaptive"])
    [unit] = group_units(group, ["adaptive"], ["work-conserving"])
    return group, unit


def test_adaptive_measured_ahead_of_both_fixed_ways_is_planned_again(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    _profiles(db)
    store = open_store(str(db))

    def unit_measured():
        return _unplanned(store)[1].measured

    _compared(db, crossover=1.35, concurrent=1.52, adaptive=1.62)  # concurrent clearly ahead of crossover
    group = _plan(db, tmp_path)
    assert group.sharing == "adaptive" and group.predicted_gain == pytest.approx(1.62)
    assert group.sharing_reason.endswith("; but adaptive measured 1.62 on these jobs, concurrent 6.2% below it, more than "
                                         "the error of the two figures (4.0%)")
    # and the group does not settle on the two ways' figures, which do not describe the states it switches between
    assert unit_measured() is None
    _compared(db, "e2", crossover=1.35, concurrent=1.52, adaptive=1.50)  # the newest three's mean: 1.56, within it
    assert _plan(db, tmp_path).sharing == "concurrent"
    assert unit_measured().aggregates == {TURNS: pytest.approx(1.35), FREE: pytest.approx(1.52)}
    store.close()


def test_a_changed_recipe_another_link_or_other_hardware_is_never_used(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    _profiles(db)
    _profiles(db, link="2gbit")
    # a changed recipe: resnet-digits with another batch is another job (its length alone would not be)
    changed = dataclasses.replace(load_recipe("resnet-digits"), batch_size=load_recipe("resnet-digits").batch_size * 2)
    _compared(db, "e-changed", recipes=("mlp-digits", changed))
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}
    # only a longer run of the same jobs: it holds
    longer = with_overrides(load_recipe("resnet-digits"), iterations=999)
    _compared(db, "e-longer", recipes=("mlp-digits", longer))
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"measured"}
    # another link: the plan at 2gbit finds nothing measured there
    assert set(_plan(db, tmp_path, link="2gbit").predicted_from.values()) == {"simulated"}
    # other hardware: the same rows on another machine's fingerprint are left alone
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for row in session.query(SharingMeasurement).all():
            row.hardware = "another machine"
    store.close()
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}


def test_a_measurement_under_other_settings_is_never_used(isolated_results, tmp_path, monkeypatch):
    """A comparison run with a switch turned off (bench/ablation.py's XOVER_COMM_THREADS=normal) is not the
    figure of a plan under the defaults, nor the reverse; under the same settings it is."""
    db = isolated_results / "xover.db"
    _profiles(db)
    monkeypatch.setenv("XOVER_COMM_THREADS", "normal")
    monkeypatch.setenv("XOVER_LINK_BANDS", "off")
    _compared(db, "e-ablation", crossover=1.35, concurrent=1.52)
    with open_store(str(db)).session() as session:
        [tuning] = {row.tuning for row in session.query(SharingMeasurement).all()}
    assert tuning == "XOVER_LINK_BANDS=off XOVER_COMM_THREADS=normal"
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"measured"}  # the same settings: it holds
    monkeypatch.delenv("XOVER_COMM_THREADS")
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}  # one setting back at its default
    monkeypatch.delenv("XOVER_LINK_BANDS")
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}  # the defaults
    _compared(db, "e-defaults", crossover=1.50, concurrent=1.40)
    learnt = _plan(db, tmp_path)
    assert learnt.predicted_by_sharing["crossover"] == pytest.approx(1.50)  # only the defaults' comparison
    # a row stored before the settings were recorded (NULL) is taken as measured under the defaults
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for row in session.query(SharingMeasurement).filter_by(experiment_id="e-defaults"):
            row.tuning = None
    store.close()
    assert _plan(db, tmp_path).predicted_by_sharing["crossover"] == pytest.approx(1.50)


def test_a_profile_taken_under_other_threads_is_never_planned_with(isolated_results, tmp_path, monkeypatch):
    """A profile holds under the settings that change a job alone (XOVER_THREADS_PER_RANK, XOVER_PIN_CORES,
    XOVER_TORCH_BACKEND, XOVER_DETERMINISTIC) it was taken under: a plan under others refuses it and says
    why, and a run orders its jobs by it only where it has none under its own; a switch of sharing alone
    (XOVER_COMM_THREADS, bench/ablation.py's) leaves profiles as they hold. Before, a profile taken with one
    thread per rank planned jobs run with two."""
    db = isolated_results / "xover.db"
    _profiles(db)  # NULL: stored before the settings were kept, taken as the defaults
    monkeypatch.setenv("XOVER_THREADS_PER_RANK", "2")
    with pytest.raises(XoverError) as refused:
        _plan(db, tmp_path)
    assert ("its profiles were taken under other settings: the defaults; here: XOVER_THREADS_PER_RANK=2"
            in str(refused.value)), refused.value
    shown = runner.invoke(app, ["plan", *PAIR, "--devices", "2", "--bandwidth", "1gbit",
                                "--out", str(tmp_path / "refused.json")])
    assert shown.exit_code == 2 and "XOVER_THREADS_PER_RANK=2" in shown.output, shown.output
    store = open_store(str(db))
    job = job_for(load_recipe("mlp-digits"))
    # a run under these threads orders its jobs (and sizes --seconds) by the only profile there is
    assert stored_profile(store, job, Link.parse("1gbit"), hardware_fingerprint()).tuning is None
    _profiles(db, tuning="XOVER_THREADS_PER_RANK=2")  # `xover profile` under these threads
    assert stored_profile(store, job, Link.parse("1gbit"), hardware_fingerprint()).tuning == "XOVER_THREADS_PER_RANK=2"
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}
    monkeypatch.delenv("XOVER_THREADS_PER_RANK")
    monkeypatch.setenv("XOVER_COMM_THREADS", "normal")  # sharing's switch: the defaults' profiles hold
    assert stored_profile(store, job, Link.parse("1gbit"), hardware_fingerprint()).tuning is None
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "gloo")  # this CPU's default backend, named: the same runs
    assert stored_profile(store, job, Link.parse("1gbit"), hardware_fingerprint()).tuning is None
    assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}
    store.close()


def test_an_adaptive_group_starts_from_what_was_measured_on_the_same_jobs(isolated_results, tmp_path):
    """`xover run --group A B --mode adaptive` (no plan) and a plan's adaptive group: both states as the store
    measured them on these jobs, handed to the group's controller (run/adaptive.py's MeasuredBefore)."""
    db = isolated_results / "xover.db"
    _profiles(db)
    store = open_store(str(db))

    def unplanned():
        return _unplanned(store)

    group, unit = unplanned()  # profiles only: simulated, so the group probes
    assert set(group.predicted_from.values()) == {"simulated"} and unit.measured is None
    _compared(db, crossover=1.35, concurrent=1.75)
    group, unit = unplanned()
    assert group.predicted_from["crossover"] == group.predicted_from["concurrent"] == "measured"
    assert unit.prior == FREE
    assert unit.measured.aggregates == {TURNS: pytest.approx(1.35), FREE: pytest.approx(1.75)}
    assert unit.measured.verdict(AdaptiveSettings()).state == FREE  # 26% apart: it settles without a probe
    # a plan's group carries where each figure came from into the run
    _plan(db, tmp_path)
    [planned], _ = groups_from_plan(str(tmp_path / "plan.json"), iterations=None, engine=None, allow_changed=False)
    assert planned.predicted_from["concurrent"] == "measured"
    assert measured_before(planned).aggregates[FREE] == pytest.approx(1.75)
    store.close()


def test_figures_that_are_the_mean_of_three_comparisons_settle_a_group_closer_apart(isolated_results, tmp_path):
    """How many comparisons each measured figure is the mean of goes from the store through the plan (its file
    too) and a run without a plan into the adaptive group, whose rule weighs the figures by it: 1.43 against
    1.33 (7.5% apart) probes on one comparison and settles on the mean of three."""
    db = isolated_results / "xover.db"
    _profiles(db)
    _compared(db, "e0", crossover=1.43, concurrent=1.33, adaptive=1.43)
    _plan(db, tmp_path)
    [once], _ = groups_from_plan(str(tmp_path / "plan.json"), iterations=None, engine=None, allow_changed=False)
    assert once.measured_runs == {"crossover": 1, "concurrent": 1, "adaptive": 1}
    assert measured_before(once).verdict(AdaptiveSettings()) is None  # one comparison each: it probes
    for number in (1, 2, 3):
        _compared(db, f"e{number}", crossover=1.43, concurrent=1.33, adaptive=1.43)
    group = _plan(db, tmp_path)
    assert group.measured_runs == {"crossover": 3, "concurrent": 3, "adaptive": 3}  # each the mean of the newest three
    assert json.loads((tmp_path / "plan.json").read_text())["groups"][0]["measured_runs"]["crossover"] == 3
    [planned], _ = groups_from_plan(str(tmp_path / "plan.json"), iterations=None, engine=None, allow_changed=False)
    settled = measured_before(planned).verdict(AdaptiveSettings())
    assert settled is not None and settled.state == TURNS and settled.rule == "measured"
    store = open_store(str(db))
    unplanned, unit = _unplanned(store)
    store.close()
    assert unplanned.measured_runs["concurrent"] == 3 and unit.measured.runs == {TURNS: 3, FREE: 3}
    assert unit.measured.verdict(AdaptiveSettings()).state == TURNS


def test_the_bench_replans_its_pairs_from_what_it_measured(isolated_results, tmp_path, capsys):
    """bench/crossover_pair.py's re-plan section (make bench), on a bench row of the pair as it writes one:
    the pair planned again from the store's profiles and the comparison it just learnt, each way measured
    against its re-plan, a row of two copies of one recipe too (planned as name, name#2)."""
    from conftest import load_bench

    db = isolated_results / "xover.db"
    _profiles(db)
    _compared(db, crossover=1.35, concurrent=1.52, adaptive=1.50)
    _compared(db, experiment="e2", recipes=("mlp-digits", "mlp-digits"), crossover=1.2, concurrent=1.1)
    bench = load_bench("crossover_pair")
    row = {"pair": ":".join(PAIR), "engine": "horovod", "policies": {"work-conserving": {"aggregate": 1.38}},
           "concurrent": 1.52, "adaptive": 1.40}
    twins = dict(row, pair="mlp-digits:mlp-digits")
    bench.print_replan([row, twins], "1gbit")
    lines = capsys.readouterr().out.splitlines()
    shown = {line.split()[2]: line.split()[3:] for line in lines if line.startswith(row["pair"])}
    assert shown == {"crossover": ["1.38", "1.35", "measured", "-2.2%"],
                     "concurrent": ["1.52", "1.52", "measured", "+0.0%"],
                     "adaptive": ["1.40", "1.50", "measured", "+7.1%"]}, lines
    assert [line.split()[2:6] for line in lines if line.startswith("mlp-digits:mlp-digits")] == [
        ["crossover", "1.38", "1.20", "measured"], ["concurrent", "1.52", "1.10", "measured"],
        ["adaptive", "1.40", "1.50", "measured"]]
    assert lines[-1] == "re-planned within 3% of what was measured: 2 of 6"
    # and what `xover plan` would pick for the pair now (the bench's pick column), from the same measurements
    found = bench.plans_pick(list(PAIR), bench.predictions(list(PAIR), "1gbit", "horovod")["profiles"], "1gbit",
                             "horovod")
    assert found.sharing == "concurrent" and "(measured)" in found.reason


def test_a_stored_profile_no_job_can_have_is_one_line_naming_the_job(tmp_path):
    """A profile with a compute under a microsecond (made by hand, or by an xover before the bound) gave
    `plan` a traceback from the planner's check."""
    db = tmp_path / "x.db"
    _profiles(db)
    store = open_store(str(db))
    with store.session() as session, session.begin():
        session.query(Profile).filter(Profile.name == "mlp-digits").update({Profile.compute_ms: 1e-9})
    store.close()
    with pytest.raises(XoverError, match=r"the stored profile of 'mlp-digits' \(np 2\) cannot be planned with: "
                                         r"compute_ms must be at least 0.001.*profile it again"):
        _plan(db, tmp_path)


def test_the_bench_compares_adaptive_states_compute_with_their_columns_runs(isolated_results):
    """bench/crossover_pair.py's state_compute, from a real store: each job's compute per iteration inside
    adaptive's turns and free stretches (probe and settled; not its warm-up) over the same job's in the
    crossover and concurrent runs of the row, the jobs averaged; a way adaptive spent too little time in to
    measure is left out."""
    from conftest import load_bench

    from xover.store.models import IterationMetric, Run, SharingSegment

    db = isolated_results / "xover.db"
    store = open_store(str(db))
    with store.session() as session, session.begin():
        session.add(Experiment(id="e1", kind="run", command="xover run", status="finished"))
        snapshot = snapshot_recipe(session, load_recipe("mlp-digits"))
        # (mode, policy) -> compute s of each job's iterations at wall times 100 + step
        runs = {("crossover", "work-conserving"): {"a": 0.10, "b": 0.02}, ("concurrent", None): {"a": 0.20, "b": 0.04}}
        for (mode, policy), computes in runs.items():
            for name, compute in computes.items():
                run = Run(experiment_id="e1", recipe_id=snapshot.id, name=name, mode=mode, policy=policy, hosts="h",
                          np=1, status="finished")
                session.add(run)
                session.flush()
                session.add_all(IterationMetric(run_id=run.id, step=step, time_s=step, wall_time=100.0 + step,
                                                iteration_s=compute, data_s=0, compute_s=compute, communication_s=0,
                                                wait_s=0, samples=1) for step in range(20))
        adaptive = {}
        for name, (turns, free, warm) in {"a": (0.12, 0.18, 9.0), "b": (0.02, 0.05, 9.0)}.items():
            run = Run(experiment_id="e1", recipe_id=snapshot.id, name=name, mode="adaptive",
                      policy="work-conserving", hosts="h", np=1, status="finished")
            session.add(run)
            session.flush()
            adaptive[name] = run.id
            # steps 0-4 the warm-up (left out), 5-9 a warm-up segment too, 10-19 turns, 20-39 free
            session.add_all(IterationMetric(run_id=run.id, step=step, time_s=step, wall_time=200.0 + step,
                                            iteration_s=1, data_s=0, samples=1, communication_s=0, wait_s=0,
                                            compute_s=warm if step < 10 else turns if step < 20 else free)
                            for step in range(40))
        for seq, (kind, way, start, end) in enumerate([("warm-up", "crossover", 199.5, 209.5),
                                                       ("probe", "crossover", 209.5, 214.5),
                                                       ("settled", "crossover", 214.5, 219.5),
                                                       ("probe", "concurrent", 219.5, 239.5)]):
            session.add(SharingSegment(experiment_id="e1", run_id=adaptive["a"], runs=list(adaptive.values()),
                                       group_index=0, seq=seq, kind=kind, way=way, reason="", started=start,
                                       ended=end, speeds={}))
    store.close()
    bench = load_bench("crossover_pair")
    found = bench.state_compute("e1")
    assert found == pytest.approx({"crossover": (0.12 / 0.10 + 0.02 / 0.02) / 2, "concurrent": (0.18 / 0.20 + 0.05 / 0.04) / 2})


def test_a_measurement_of_a_script_whose_local_module_changed_is_never_used(isolated_results, tmp_path):
    """train.py importing model.py beside it: a comparison of two jobs of it is kept; the next plan's lookup
    (plan/step.py's measurements_of) finds it for the same files, and not once model.py is edited."""
    from xover.plan.make import local_hosts
    from xover.plan.step import measurements_of

    (tmp_path / "model.py").write_text("HIDDEN = 128\n")
    (tmp_path / "train.py").write_text("import torch.distributed as dist\nfrom model import HIDDEN\nprint(HIDDEN)\n")
    for name, batch in (("a", 64), ("b", 128)):
        (tmp_path / f"{name}.toml").write_text(
            f'name = "{name}"\nscript = "train.py"\nargs = ["--batch", "{batch}"]\nnp = 1\niterations = 50\n')

    def found():
        recipes = [load_recipe(tmp_path / "a.toml"), load_recipe(tmp_path / "b.toml")]
        jobs = [job_for(recipe) for recipe in recipes]
        measured = measurements_of(None, recipes, "horovod", local_hosts(1), Link.of_key("1gbit"))
        return set(measured.for_group(jobs, "work-conserving")), recipes

    _, recipes = found()
    assert _compared(isolated_results / "xover.db", recipes=recipes) == 3
    assert found()[0] == {"crossover", "concurrent", "adaptive"}
    (tmp_path / "model.py").write_text("HIDDEN = 4096\n")  # the model the script trains is another
    assert found()[0] == set()
    (tmp_path / "model.py").write_text("HIDDEN = 128\n")  # as it was measured: it holds again
    assert found()[0] == {"crossover", "concurrent", "adaptive"}


def test_a_measurement_under_a_fault_setting_of_the_turn_servers_is_never_used(isolated_results, tmp_path, monkeypatch):
    """XOVER_TURN_HEARTBEAT and XOVER_TURN_SEND_BUFFER (bench/chaos.py's stop-waiter fault) change how a waiting
    worker is kept and when it loses its turns: a comparison under them is not a figure for the defaults."""
    db = isolated_results / "xover.db"
    _profiles(db)
    for variable, value in (("XOVER_TURN_HEARTBEAT", "0.01"), ("XOVER_TURN_SEND_BUFFER", "1")):
        monkeypatch.setenv(variable, value)
        _compared(db, f"e-{variable}")
        assert set(_plan(db, tmp_path).predicted_from.values()) == {"measured"}  # the same settings: it holds
        monkeypatch.delenv(variable)
        assert set(_plan(db, tmp_path).predicted_from.values()) == {"simulated"}


HOROVOD_SCRIPT = ROOT / "recipes" / "examples" / "horovod_digits.py"


def _script_pair(folder):
    """Two job files of one Horovod script at two batch sizes, named after their files (no `name`)."""
    (folder / "train.py").write_bytes(HOROVOD_SCRIPT.read_bytes())
    for file, batch in (("small.toml", 16), ("large.toml", 128)):
        (folder / file).write_text(f'script = "train.py"\nargs = ["--batch-size", "{batch}"]\nnp = 2\n'
                                   "iterations = 200\n")
    small, large = load_recipe(folder / "small.toml"), load_recipe(folder / "large.toml")
    return small, large


def _cli_plan(tmp_path, *files):
    """`xover plan FILES --devices 2 --bandwidth 1gbit`: its output, and its plan file's one group."""
    out = tmp_path / "cli-plan.json"
    shown = runner.invoke(app, ["plan", *map(str, files), "--devices", "2", "--bandwidth", "1gbit", "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    [group] = json.loads(out.read_text())["groups"]
    return " ".join(shown.output.split()), group


def test_a_renamed_job_file_finds_its_profile_and_what_it_measured(isolated_results, tmp_path):
    """Renaming a job file (a job is named after its file unless it says otherwise) made the next `xover plan`
    find no profile of it ("no horovod profile of 'tiny'"), and no measurement: the name was in both keys. A
    job is what it computes: profiled and compared as small.toml, planned as tiny.toml, it is measured."""
    db = isolated_results / "xover.db"
    small, large = _script_pair(tmp_path)
    _profiles(db, jobs=((small, 5.0, 60.0), (large, 60.0, 8.0)))
    assert _compared(db, recipes=(small, large)) == 3
    (tmp_path / "small.toml").rename(tmp_path / "tiny.toml")
    shown, group = _cli_plan(tmp_path, tmp_path / "tiny.toml", tmp_path / "large.toml")
    assert sorted(group["jobs"]) == ["large", "tiny"]
    assert group["predicted_from"]["concurrent"] == group["predicted_from"]["crossover"] == "measured"
    assert "crossover 1.35*" in shown and "concurrent 1.52 (measured)" in shown, shown
    # so is one that says another `name` (and `description`) in it
    (tmp_path / "tiny.toml").write_text('name = "mine"\ndescription = "the small batch"\n'
                                        + (tmp_path / "tiny.toml").read_text())
    shown, group = _cli_plan(tmp_path, tmp_path / "tiny.toml", tmp_path / "large.toml")
    assert sorted(group["jobs"]) == ["large", "mine"] and group["predicted_from"]["concurrent"] == "measured"
    # other arguments are another job: its profile is asked for, nothing measured holds
    (tmp_path / "tiny.toml").write_text((tmp_path / "tiny.toml").read_text().replace('"16"', '"32"'))
    refused = runner.invoke(app, ["plan", str(tmp_path / "tiny.toml"), str(tmp_path / "large.toml"), "--devices", "2",
                                  "--bandwidth", "1gbit", "--out", str(tmp_path / "refused.json")])
    assert refused.exit_code == 2 and "no horovod profile of 'mine'" in refused.output, refused.output
    # a changed script is another job too, and the plan says it changed though it was profiled under another name
    (tmp_path / "tiny.toml").write_text((tmp_path / "tiny.toml").read_text().replace('"32"', '"16"'))
    (tmp_path / "train.py").write_text(HOROVOD_SCRIPT.read_text() + "\n# edited\n")
    refused = runner.invoke(app, ["plan", str(tmp_path / "tiny.toml"), str(tmp_path / "large.toml"), "--devices", "2",
                                  "--bandwidth", "1gbit", "--out", str(tmp_path / "refused.json")])
    assert refused.exit_code == 2 and "no horovod profile of 'mine'" in refused.output, refused.output
    assert "or a module of its own it imports, changed since it was profiled" in " ".join(refused.output.split())


def test_a_measurement_holds_only_at_the_ranks_and_under_the_engine_it_was_taken_at(isolated_results):
    """A group's measurement is found for the same jobs under other names and descriptions, never at other
    ranks, under another engine or for a changed script (its body: another content hash)."""
    db = isolated_results / "xover.db"
    _compared(db)
    recipes = [load_recipe(name) for name in PAIR]

    def ways(recipes, engine="horovod"):
        measured = measurements_of(str(db), list(recipes), engine, local_hosts(2), Link.parse("1gbit"))
        return set(measured.for_group([SimpleNamespace(name=recipe.name) for recipe in recipes], "work-conserving"))

    assert ways(recipes) == {"crossover", "concurrent", "adaptive"}
    renamed = [dataclasses.replace(recipe, name=f"{recipe.name}-copy", description="another") for recipe in recipes]
    assert ways(renamed) == {"crossover", "concurrent", "adaptive"}
    assert ways(recipes, engine="torch") == set()
    assert ways([with_overrides(recipes[0], np=1), recipes[1]]) == set()


def test_a_changed_script_body_is_measured_again(isolated_results, tmp_path):
    db = isolated_results / "xover.db"
    small, large = _script_pair(tmp_path)
    _compared(db, recipes=(small, large))

    def ways():
        recipes = [load_recipe(tmp_path / "small.toml"), load_recipe(tmp_path / "large.toml")]
        measured = measurements_of(str(db), recipes, "horovod", local_hosts(2), Link.parse("1gbit"))
        return set(measured.for_group([SimpleNamespace(name=recipe.name) for recipe in recipes], "work-conserving"))

    assert ways() == {"crossover", "concurrent", "adaptive"}
    (tmp_path / "train.py").write_text(HOROVOD_SCRIPT.read_text() + "\n# edited\n")
    assert ways() == set()


def test_what_was_stored_before_names_left_the_keys_still_holds_under_its_names(isolated_results, tmp_path):
    """Profiles and measurements stored before 2026-12-02 were keyed with each job's name: they still hold for
    the jobs under the names they had (a plan of the same files is measured), not under new ones; a row of
    today's keys of the same group and way is preferred to one of those."""
    db = isolated_results / "xover.db"
    _profiles(db, keyed="hash")
    store = open_store(str(db))
    with store.session() as session, session.begin():
        session.add(Experiment(id="old", kind="run", command="xover run", status="finished"))
    store.close()
    # a comparison as xover kept it before: each job's workload its recipe's without its length, name included
    jobs = [job_for(load_recipe(name)) for name in PAIR]
    identities = {job.name: JobIdentity(job.recipe.legacy_workload, job.np, job.engine, len(job.devices))
                  for job in jobs}
    names = in_key_order(list(identities), identities)
    store = open_store(str(db))
    with store.session() as session, session.begin():
        for way, gain in (("crossover", 1.35), ("concurrent", 1.52)):
            speeds = {"mlp-digits": 0.9, "resnet-digits": gain - 0.9}
            add_measurement(session, experiment_id="old", group_index=0,
                            jobs_key=jobs_key([identities[name] for name in names]),
                            jobs=[{"name": name, **identities[name].to_json()} for name in names], link="1gbit",
                            hardware=hardware_fingerprint(), tuning="", way=way,
                            policy="work-conserving" if way == "crossover" else None, gain=gain,
                            speeds=[speeds[name] for name in names], window_s=10.0)
    store.close()
    learnt = _plan(db, tmp_path)  # the profiles and the measurements of before, under the names they had
    assert learnt.predicted_from == {"crossover": "measured", "concurrent": "measured"}
    assert learnt.predicted_by_sharing["concurrent"] == pytest.approx(1.52)
    assert learnt.predicted_speed["mlp-digits"] == pytest.approx(0.9)  # each job's speed its own
    renamed = [dataclasses.replace(load_recipe(name), name=f"{name}-copy") for name in PAIR]
    measured = measurements_of(str(db), renamed, "horovod", local_hosts(2), Link.parse("1gbit"))
    assert measured.for_group([SimpleNamespace(name=recipe.name) for recipe in renamed], "work-conserving") == {}
    # a comparison of today's keys: its figure, not the old one's
    _compared(db, "new", crossover=1.20, concurrent=1.30, adaptive=1.25)
    learnt = _plan(db, tmp_path)
    assert learnt.predicted_by_sharing["concurrent"] == pytest.approx(1.30)
    assert learnt.predicted_from["adaptive"] == "measured"


def test_a_recipe_edited_since_it_was_planned_is_refused_unless_allow_changed(isolated_results, tmp_path):
    """A plan's predictions and placement are of the recipe as it was planned: `xover run PLAN` ran an edited
    recipe (another batch) or another recipe file put under the job's name without a word. Now refused as a
    changed script is, unless --allow-changed; its description is not what it computes, and a plan from before
    `planned_as` was written is not checked."""
    db = isolated_results / "xover.db"
    job = tmp_path / "job.toml"
    job.write_text((ROOT / "recipes" / "mlp-digits.toml").read_text())
    _profiles(db, jobs=((load_recipe(str(job)), 5.0, 60.0), (load_recipe("resnet-digits"), 60.0, 8.0)))
    plan_file = tmp_path / "plan.json"
    plan_jobs(str(db), recipe_paths=[str(job), "resnet-digits"], trace_csv=None, devices=2, hosts=None,
              device_memory_gb=None, max_group=2, algo="matching", out=str(plan_file), link=Link.parse("1gbit"))
    body = json.loads(plan_file.read_text())
    assert body["jobs"]["mlp-digits"]["planned_as"] == load_recipe(str(job)).planned_as

    def run_it(allow_changed=False):
        [group], _ = groups_from_plan(str(plan_file), iterations=None, engine=None, allow_changed=allow_changed)
        return {spec.name: spec.recipe for spec in group.jobs}

    text = job.read_text()
    job.write_text(text.replace('description = "', 'description = "edited: '))
    assert run_it()["mlp-digits"].description.startswith("edited: ")  # words only: runs
    job.write_text(text.replace("batch_size = 32", "batch_size = 16"))
    assert "batch_size = 16" in job.read_text()
    with pytest.raises(XoverError) as refused:
        run_it()
    assert f"{job} is not the recipe this job was planned with" in str(refused.value)
    assert "plan field 'jobs.mlp-digits.planned_as'" in str(refused.value) and "--allow-changed" in str(refused.value)
    assert run_it(allow_changed=True)["mlp-digits"].batch_size == 16  # as it is now
    # another recipe file under the job's name
    job.write_text(text)
    body["jobs"]["mlp-digits"]["recipe"] = str(ROOT / "recipes" / "mlp-balanced.toml")
    plan_file.write_text(json.dumps(body))
    with pytest.raises(XoverError, match="mlp-balanced.toml is not the recipe this job was planned with"):
        run_it()
    # a plan written before `planned_as`: not checked
    del body["jobs"]["mlp-digits"]["planned_as"]
    plan_file.write_text(json.dumps(body))
    assert run_it()["mlp-digits"].model == "mlp"


def test_a_plan_of_a_recipe_given_by_a_relative_path_runs_from_another_folder(isolated_results, tmp_path,
                                                                               monkeypatch):
    # the plan kept "recipes/mlp-digits.toml" as given: `xover run PLAN` elsewhere found no such file
    db = isolated_results / "xover.db"
    _profiles(db)
    made_in, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (made_in / "recipes").mkdir(parents=True)
    elsewhere.mkdir()
    (made_in / "recipes" / "mlp-digits.toml").write_text((ROOT / "recipes" / "mlp-digits.toml").read_text())
    monkeypatch.chdir(made_in)
    plan_jobs(str(db), recipe_paths=["recipes/mlp-digits.toml", "resnet-digits"], trace_csv=None, devices=2,
              hosts=None, device_memory_gb=None, max_group=2, algo="matching", out=str(tmp_path / "plan.json"),
              link=Link.parse("1gbit"))
    kept = json.loads((tmp_path / "plan.json").read_text())["jobs"]["mlp-digits"]["recipe"]
    assert kept == str(made_in / "recipes" / "mlp-digits.toml")
    monkeypatch.chdir(elsewhere)
    [group], _ = groups_from_plan(str(tmp_path / "plan.json"), iterations=None, engine=None, allow_changed=False)
    assert sorted(job.recipe.name for job in group.jobs) == sorted(PAIR)


def test_a_plan_for_more_devices_than_this_machine_has_warns_where_it_places_groups_beyond(isolated_results,
                                                                                           tmp_path, monkeypatch):
    # `plan --devices 8` on a 2-core machine said nothing; `xover run` of the plan here then refused it
    import xover.cli

    db = isolated_results / "xover.db"
    _profiles(db)
    monkeypatch.setattr(xover.cli, "local_device_count", lambda: ("cpu", 2))
    args = [*PAIR, "--max-group", "1", "--bandwidth", "1gbit", "--out", str(tmp_path / "p.json")]
    wide = runner.invoke(app, ["plan", *args, "--devices", "4"])
    assert wide.exit_code == 0, wide.output
    assert ("warning: --devices 4: this machine has 2 CPU cores, and the plan places groups on localhost:2, "
            "localhost:3: `xover run` of it here refuses them; plan with --devices 2, or for other hosts with -H"
            in " ".join(wide.output.split())), wide.output
    fits = runner.invoke(app, ["plan", *args, "--devices", "2"])
    assert fits.exit_code == 0 and "warning" not in fits.output, fits.output


def test_a_recipe_given_twice_is_planned_as_two_copies_as_a_group_runs_them(isolated_results, tmp_path):
    """`xover plan mlp-digits mlp-digits` was refused ("a plan needs distinct job names"), where `xover run --group`
    runs the same two as mlp-digits and mlp-digits#2 (helper-90's probe, 2026-12-07). A second file of one job name
    is still refused: which of the two would the plan's name mean?"""
    db = isolated_results / "xover.db"
    _profiles(db, jobs=((load_recipe("mlp-digits"), 5.0, 60.0),))
    out = tmp_path / "plan.json"
    written = plan_jobs(str(db), recipe_paths=["mlp-digits", "recipes/mlp-digits.toml"], trace_csv=None, devices=2,
                        hosts=None, device_memory_gb=None, max_group=2, algo="matching", out=str(out),
                        link=Link.parse("1gbit"))
    [group] = written.plan.groups
    assert [job.name for job in group.jobs] == ["mlp-digits", "mlp-digits#2"]
    assert set(group.predicted_from.values()) == {"simulated"}
    [planned], _ = groups_from_plan(str(out), iterations=None, engine=None, allow_changed=False)
    assert [(job.name, job.recipe.name) for job in planned.jobs] == [("mlp-digits", "mlp-digits"),
                                                                     ("mlp-digits#2", "mlp-digits")]
    other = tmp_path / "other.toml"
    other.write_text((ROOT / "recipes/mlp-digits.toml").read_text().replace("seed = 1", "seed = 2"))
    result = runner.invoke(app, ["plan", "mlp-digits", str(other), "--devices", "2", "--bandwidth", "1gbit",
                                 "--out", str(tmp_path / "refused.json")])
    assert result.exit_code == 2, result.output
    assert "job name 'mlp-digits' is given twice (recipes/mlp-digits.toml and" in result.output
    assert not (tmp_path / "refused.json").exists()
