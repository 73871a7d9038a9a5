"""The plan's pick of each group's way of sharing: crossover, concurrent (processor sharing, or a
measured co-run stretch) and MPS, predicted by the same simulation, and how a plan run follows it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from xover.plan import (
    JobProfile,
    best_sharing,
    make_plan,
    plan_from_dict,
    plan_to_dict,
    predict_sharings,
)
from xover.plan.planfile import PlanFormatError
from xover.plan.predict import CROSSOVER_EDGE
from xover.plan.simulate import SimJob, simulate
from xover.run.jobs import GroupToRun, JobSpec
from xover.run.units import group_units


def job(name: str, compute: float, comm: float, **extra) -> JobProfile:
    return JobProfile(name=name, devices=2, compute_ms=compute, comm_ms=comm, memory_gb=0.1, **extra)


def test_concurrent_without_a_stretch_is_processor_sharing():
    # two compute-only jobs: a device shared evenly does one job's work per unit of time
    heavy = [SimJob("a", 100.0, 0.001), SimJob("b", 100.0, 0.001)]
    assert simulate(heavy, "concurrent", None).aggregate == pytest.approx(1.0, abs=0.02)


def test_a_measured_stretch_sets_the_speed_while_both_compute():
    # a GPU the jobs do not keep busy: no stretch, both compute at full speed side by side
    idle_gpu = [SimJob("a", 100.0, 0.001, corun_stretch=1.0), SimJob("b", 100.0, 0.001, corun_stretch=1.0)]
    assert simulate(idle_gpu, "concurrent", None).aggregate == pytest.approx(2.0, abs=0.02)
    # a stretch of 1.6 each: each at 1/1.6 of its speed alone
    busy = [SimJob("a", 100.0, 0.001, corun_stretch=1.6), SimJob("b", 100.0, 0.001, corun_stretch=1.6)]
    assert simulate(busy, "concurrent", None).aggregate == pytest.approx(2 / 1.6, abs=0.02)
    # under MPS the MPS stretch counts, not the time-sliced one
    mps = [SimJob("a", 100.0, 0.001, corun_stretch=2.0, mps_stretch=1.25),
           SimJob("b", 100.0, 0.001, corun_stretch=2.0, mps_stretch=1.25)]
    assert simulate(mps, "mps", None).aggregate == pytest.approx(2 / 1.25, abs=0.02)
    assert simulate(mps, "concurrent", None).aggregate == pytest.approx(1.0, abs=0.02)


def test_mps_is_considered_only_where_every_job_measured_it():
    a, b = job("a", 100, 50, mps_stretch=1.2), job("b", 60, 90)
    assert set(predict_sharings([a, b])) == {"crossover", "concurrent"}
    assert set(predict_sharings([a, job("b", 60, 90, mps_stretch=1.3)])) == {"crossover", "concurrent", "mps"}


def test_two_balanced_copies_in_phase_take_turns():
    # the same job twice computes in phase without turns; crossover interleaves them
    a, b = job("a", 100, 100), job("a#2", 100, 100)
    predictions = predict_sharings([a, b])
    assert predictions["crossover"].gain > predictions["concurrent"].gain * 1.3
    assert best_sharing(predictions, [a, b]).sharing == "crossover"


def test_turns_step_aside_where_they_buy_too_little():
    # jobs that do not keep the GPU busy (stretch 1): concurrent gets both at nearly full speed
    a, b = job("a", 100, 20, corun_stretch=1.0), job("b", 90, 30, corun_stretch=1.0)
    predictions = predict_sharings([a, b])
    chosen = best_sharing(predictions, [a, b])
    assert chosen.sharing == "concurrent"
    assert chosen.gain >= predictions["crossover"].gain


def test_crossover_must_beat_sharing_without_turns_by_the_edge():
    a, b = job("a", 100, 100), job("b", 100, 100)
    crossover = predict_sharings([a, b])["crossover"]
    close = dataclasses.replace(crossover, sharing="concurrent", gain=crossover.gain / (1 + CROSSOVER_EDGE / 2))
    assert best_sharing({"crossover": crossover, "concurrent": close}, [a, b]).sharing == "concurrent"
    behind = dataclasses.replace(close, gain=crossover.gain / (1 + CROSSOVER_EDGE * 2))
    assert best_sharing({"crossover": crossover, "concurrent": behind}, [a, b]).sharing == "crossover"


def test_a_plan_carries_each_groups_sharing_and_the_ways_it_considered():
    jobs = [job("a", 100, 100), job("a#2", 100, 100), job("c", 100, 20, corun_stretch=1.0),
            job("d", 90, 30, corun_stretch=1.0)]
    plan = make_plan(jobs, [("h", 2)], algo="matching")
    by_jobs = {tuple(sorted(j.name for j in g.jobs)): g for g in plan.groups}
    for group in plan.groups:
        if len(group.jobs) == 1:
            assert group.sharing == "alone" and group.predicted_by_sharing == {}
            continue
        assert set(group.predicted_by_sharing) == {"crossover", "concurrent"}
        assert group.predicted_gain == pytest.approx(group.predicted_by_sharing[group.sharing])
    assert by_jobs[("a", "a#2")].sharing == "crossover"
    if ("c", "d") in by_jobs:
        assert by_jobs[("c", "d")].sharing == "concurrent"
    document = json.loads(json.dumps(plan_to_dict(plan)))
    again = plan_from_dict(document)
    assert [(g.sharing, g.predicted_by_sharing) for g in again.groups] == \
           [(g.sharing, g.predicted_by_sharing) for g in plan.groups]
    assert {j.name: j.corun_stretch for j in again.jobs} == {j.name: j.corun_stretch for j in plan.jobs}


def test_a_plan_from_before_the_pick_runs_its_groups_in_crossover():
    document = plan_to_dict(make_plan([job("a", 100, 100), job("a#2", 100, 100)], [("h", 2)]))
    for group in document["groups"]:
        del group["sharing"], group["predicted_by_sharing"]
    assert [g.sharing for g in plan_from_dict(document).groups] == ["crossover"]


@pytest.mark.parametrize("sharing, problem", [("turns", "unknown way of sharing 'turns'"),
                                              ("alone", "'alone' is for a group of one job, and this one has 2")])
def test_a_bad_sharing_is_named(sharing, problem):
    document = plan_to_dict(make_plan([job("a", 100, 100), job("a#2", 100, 100)], [("h", 2)]))
    document["groups"][0]["sharing"] = sharing
    with pytest.raises(PlanFormatError, match=rf"groups\[0\]\.sharing.*{problem}"):
        plan_from_dict(document)


@pytest.mark.parametrize("runs, problem", [({"concurrent": 0}, r"measured_runs\.concurrent': must be a whole number from 1 to"),
                                           ({"concurrent": "3"}, r"measured_runs\.concurrent': must be a whole number"),
                                           ({"turns": 3}, "measured_runs.*unknown way of sharing 'turns'")])
def test_a_bad_count_of_measurements_is_named_and_a_plan_without_them_counts_one(runs, problem):
    document = plan_to_dict(make_plan([job("a", 100, 100), job("a#2", 100, 100)], [("h", 2)]))
    assert document["groups"][0]["measured_runs"] == {}  # nothing measured: every figure simulated
    document["groups"][0]["measured_runs"] = runs
    with pytest.raises(PlanFormatError, match=rf"groups\[0\]\.{problem}"):
        plan_from_dict(document)
    del document["groups"][0]["measured_runs"]  # a plan from before the count was kept
    assert plan_from_dict(document).groups[0].measured_runs == {}


@pytest.mark.parametrize("sharing, mode", [("crossover", "crossover"), ("concurrent", "concurrent"),
                                           ("mps", "concurrent")])
def test_a_planned_group_runs_in_its_plans_way(sharing, mode):
    from xover.recipes import load_recipe

    recipe = load_recipe("mlp-digits")
    jobs = [JobSpec("a", recipe, {"localhost": [0, 1]}), JobSpec("b", recipe, {"localhost": [0, 1]})]
    [unit] = group_units(GroupToRun(0, jobs, 1.2, sharing), ["planned"], ["work-conserving", "round-robin"])
    assert unit.mode == mode and unit.policy == ("work-conserving" if mode == "crossover" else None)


def test_a_trace_gives_gpu_stretches_and_the_plan_considers_mps(tmp_path):
    from xover.plan import load_trace_csv

    trace = tmp_path / "gpu.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,corun_stretch,mps_stretch\n"
                     "resnet,2,80,70,10,1.9,1.6\nresnet#2,2,80,70,10,1.9,1.6\nsmall,2,20,5,1,,\n")
    jobs = load_trace_csv(trace)
    assert [(j.corun_stretch, j.mps_stretch) for j in jobs] == [(1.9, 1.6), (1.9, 1.6), (None, None)]
    predictions = predict_sharings(jobs[:2])
    assert set(predictions) == {"crossover", "concurrent", "mps"}
    # GPU-bound copies whose communication is about their compute: turns beat time-slicing and MPS
    assert best_sharing(predictions, jobs[:2]).sharing == "crossover"
    bad = tmp_path / "bad.csv"
    bad.write_text("name,devices,compute_ms,comm_ms,memory_gb,mps_stretch\nx,2,80,70,10,-1\n")
    with pytest.raises(Exception, match=r"line 2: mps_stretch must be a finite number > 0"):
        load_trace_csv(bad)


def test_the_report_sets_the_pick_beside_the_best_measured_mode():
    from xover.results import GroupComparison, GroupModel, GroupReport

    comparison = GroupComparison(group=0, jobs=["a", "b"], policies={}, sequential=1.0,
                                 measured={"concurrent": 1.35, "crossover": 1.20},
                                 overlaps={"concurrent": 1.0, "crossover": 1.0}, crossover_policy="work-conserving",
                                 windows={"concurrent": 10.0, "crossover": 10.0}, starts_apart={})
    picked_turns = GroupReport.of(comparison, {}, 1.3, GroupModel(), "crossover", {"crossover": 1.3, "concurrent": 1.25})
    assert picked_turns.best_measured == "concurrent"
    assert picked_turns.pick_vs_best == pytest.approx(1.20 / 1.35)
    assert picked_turns.concurrent_predicted == 1.25
    assert picked_turns.concurrent_error_pct == pytest.approx((1.35 / 1.25 - 1) * 100)
    # a comparison run under MPS measures MPS as its concurrent mode, and is predicted as MPS
    under_mps = GroupReport.of(comparison, {}, 1.3, GroupModel(), "mps", {"crossover": 1.3, "concurrent": 1.1,
                                                                          "mps": 1.4}, concurrent_under="mps")
    assert under_mps.best_measured == "mps" and under_mps.pick_vs_best == 1.0 and under_mps.concurrent_predicted == 1.4
    # a pick that did not run in the comparison (MPS, measured time-sliced) has nothing to set beside the best
    assert GroupReport.of(comparison, {}, 1.3, GroupModel(), "mps", {}).pick_vs_best is None


def test_the_gpus_busy_fraction_is_taken_inside_the_compute_windows():
    from types import SimpleNamespace

    from xover.profile.step import busy_in_windows, compute_windows

    # two iterations: compute 10.0-10.08 s and 10.2-10.28 s; the GPU busy then, idle while communicating
    metrics = [SimpleNamespace(wall_time=10.08, data_s=0.0, compute_s=0.08),
               SimpleNamespace(wall_time=10.28, data_s=0.01, compute_s=0.07)]
    windows = compute_windows(metrics, warmup=0)
    assert windows == [pytest.approx((10.0, 10.08)), pytest.approx((10.2, 10.28))]
    samples = [(10.01, 0.9), (10.05, 1.0), (10.12, 0.0), (10.16, 0.0), (10.21, 0.9), (10.25, 1.0), (10.3, 0.0)]
    assert busy_in_windows(samples, windows) == pytest.approx(0.95)
    assert busy_in_windows(samples, [(20.0, 21.0)]) is None  # no sample there: unknown, not idle


# ------------------------------------------------------------------------------------ the plan's pick (issue 60)

from xover.plan.calibration import SHIPPED  # noqa: E402
from xover.plan.measured import JobIdentity, MeasuredWay, Measurements, in_key_order, jobs_key  # noqa: E402
from xover.plan.predict import measured_prediction, pick_sharing, predict_considered  # noqa: E402


def _ways(crossover: float, concurrent: float, jobs):
    predictions = predict_sharings(jobs)
    return {"crossover": dataclasses.replace(predictions["crossover"], gain=crossover),
            "concurrent": dataclasses.replace(predictions["concurrent"], gain=concurrent)}


def test_ways_closer_than_the_models_error_pick_adaptive_and_say_why():
    a, b = job("a", 100, 60), job("b", 60, 100)
    close = pick_sharing(_ways(1.40, 1.36, [a, b]), [a, b])  # 2.9% apart, the model misses by 7.75%
    assert close.sharing == "adaptive"
    assert close.prediction.gain == pytest.approx(1.40)  # it settles on the better: predicted as that one
    assert close.reason == ("crossover 1.40 (simulated), concurrent 1.36 (simulated): 2.9% apart, within the model's "
                            "measured error (7.8%); adaptive measures both while it runs")
    clear = pick_sharing(_ways(1.40, 1.20, [a, b]), [a, b])
    assert clear.sharing == "crossover" and "crossover ahead, concurrent 14.3% below it, more than the model's measured error" in clear.reason
    behind = pick_sharing(_ways(1.10, 1.40, [a, b]), [a, b])
    assert behind.sharing == "concurrent"


def test_the_threshold_is_the_models_error_or_a_measurements():
    a, b = job("a", 100, 60), job("b", 60, 100)
    ways = _ways(1.40, 1.34, [a, b])  # 4.3% apart
    assert pick_sharing(ways, [a, b]).sharing == "adaptive"  # simulated: within 7.75%
    measured = {"crossover": "measured", "concurrent": "measured"}
    found = pick_sharing(ways, [a, b], measured)  # both measured: their error is 4%, and 4.3% is beyond it
    assert found.sharing == "crossover" and "the measurements' error (4.0%)" in found.reason
    mixed = {"crossover": "measured", "concurrent": "simulated"}
    assert pick_sharing(ways, [a, b], mixed).sharing == "adaptive"  # one simulated: the model's error holds
    assert pick_sharing(ways, [a, b], calibration=dataclasses.replace(SHIPPED, model_error=0.02)).sharing == "crossover"


def test_adaptive_measured_clearly_ahead_of_the_better_fixed_way_is_picked():
    a, b = job("a", 100, 60), job("b", 60, 100)
    ways = _ways(1.40, 1.20, [a, b])  # crossover clearly ahead
    both = {"crossover": "measured", "concurrent": "measured"}
    ahead = {**ways, "adaptive": measured_prediction([a, b], "adaptive", "work-conserving", {"a": 0.8, "b": 0.72})}
    found = pick_sharing(ahead, [a, b], {**both, "adaptive": "measured"})
    assert found.sharing == "adaptive" and found.prediction.gain == pytest.approx(1.52)
    assert found.reason.endswith("; but adaptive measured 1.52 on these jobs, crossover 7.9% below it, more than the "
                                 "error of the two figures (4.0%)")
    # within the error of the two figures: the fixed way, as before
    near = {**ways, "adaptive": measured_prediction([a, b], "adaptive", "work-conserving", {"a": 0.75, "b": 0.7})}
    assert pick_sharing(near, [a, b], {**both, "adaptive": "measured"}).sharing == "crossover"
    # against a simulated figure, the model's error
    for model_error, picked in ((0.07, "adaptive"), (0.1, "crossover")):
        calibration = dataclasses.replace(SHIPPED, model_error=model_error)
        assert pick_sharing(ahead, [a, b], {"adaptive": "measured"}, calibration).sharing == picked
    # only a measurement of adaptive counts: its simulated stand-in never beats the way it stands in for
    assert pick_sharing(ahead, [a, b], both).sharing == "crossover"
    # nor one that breaks a job's protection
    slow = job("a", 100, 60, max_slowdown=1.2)
    assert pick_sharing(ahead, [slow, b], {**both, "adaptive": "measured"}).sharing == "crossover"


def test_a_way_that_breaks_a_jobs_protection_is_never_probed():
    a, b = job("a", 100, 60, max_slowdown=1.5), job("b", 60, 100)
    ways = _ways(1.40, 1.38, [a, b])
    ways["concurrent"] = dataclasses.replace(ways["concurrent"], speeds={"a": 0.5, "b": 0.88})  # a at 2x
    found = pick_sharing(ways, [a, b])
    assert found.sharing == "crossover" and "would leave a job beyond its max_slowdown" in found.reason


def test_a_measurement_holds_for_the_same_jobs_in_any_order_and_under_the_plans_policy():
    a, b = job("a", 100, 60), job("b", 60, 100)
    ids = {"a": JobIdentity("wa", 2, "horovod"), "b": JobIdentity("wb", 2, "horovod")}
    key = jobs_key([ids["b"], ids["a"]])
    assert key == jobs_key([ids["a"], ids["b"]])
    measured = Measurements(
        {key: {"crossover:work-conserving": MeasuredWay(1.5, (0.6, 0.9), "e1", "work-conserving"),
               "crossover:round-robin": MeasuredWay(1.1, (0.5, 0.6), "e1", "round-robin"),
               "concurrent": MeasuredWay(1.3, (0.7, 0.6), "e1")}}, ids)
    found = measured.for_group([b, a], "work-conserving")
    assert found["crossover"][1] == {"a": 0.6, "b": 0.9}  # speeds back to the jobs by their identities
    assert found["concurrent"][1] == {"a": 0.7, "b": 0.6}
    assert measured.for_group([a, b], "round-robin")["crossover"][0].gain == 1.1
    other = Measurements(measured.ways, {**ids, "b": JobIdentity("wb-changed", 2, "horovod")})
    assert other.for_group([a, b], "work-conserving") == {}
    predictions, sources = predict_considered([a, b], measured=measured)
    assert predictions["crossover"].gain == pytest.approx(1.5) and sources == {"crossover": "measured",
                                                                                "concurrent": "measured"}
    assert predictions["crossover"].speeds == {"a": 0.6, "b": 0.9}
    # the duration from the measured speeds: b (100 iterations of 160 ms at 0.9) ends first, then a goes on alone
    prediction = measured_prediction([a, b], "crossover", "work-conserving", {"a": 0.6, "b": 0.9})
    assert prediction.duration_ms == pytest.approx(100 * 160 / 0.9 + (100 - 100 * 160 / 0.9 / (160 / 0.6)) * 160)


def _row(ids, names, way, gain, speeds, policy=None, experiment="old"):
    """A stored row as store/measured.py hands it: the jobs in the order of their identities there."""
    order = in_key_order(names, ids)
    return {"jobs_key": jobs_key([ids[name] for name in order]), "way": way, "policy": policy, "gain": gain,
            "jobs": [{"name": name, **ids[name].to_json()} for name in order],
            "speeds": [speeds[name] for name in order], "experiment": experiment, "measurements": 1}


def test_a_row_keyed_before_names_left_the_workload_holds_for_its_jobs_under_their_names():
    """Rows stored before 2026-12-02 (each workload with the job's name in it) are read as today's keys of the
    same jobs, their speeds put back in today's order (here the reverse of theirs); a row of today's keys of the
    same group and way is preferred; a job under another name does not find them."""
    a, b = job("a", 100, 60), job("b", 60, 100)
    today = {"a": JobIdentity("w2", 2, "horovod"), "b": JobIdentity("w1", 2, "horovod")}
    before = {"a": JobIdentity("L1", 2, "horovod"), "b": JobIdentity("L2", 2, "horovod")}
    assert in_key_order(["a", "b"], today) == ["b", "a"] and in_key_order(["a", "b"], before) == ["a", "b"]
    rows = [_row(before, ["a", "b"], "concurrent", 1.3, {"a": 0.9, "b": 0.4}),
            _row(before, ["a", "b"], "crossover", 1.1, {"a": 0.5, "b": 0.6}, policy="work-conserving"),
            _row(today, ["a", "b"], "crossover", 1.6, {"a": 0.7, "b": 0.9}, policy="work-conserving", experiment="new")]
    found = Measurements.of_rows(rows, today, before).for_group([a, b], "work-conserving")
    assert found["concurrent"][1] == {"a": 0.9, "b": 0.4}
    assert found["crossover"][0].experiment == "new" and found["crossover"][1] == {"a": 0.7, "b": 0.9}
    assert set(Measurements.of_rows(rows, today).for_group([a, b], "work-conserving")) == {"crossover"}
    renamed = {**before, "a": JobIdentity("L1-renamed", 2, "horovod")}  # its old key had its old name in it
    assert set(Measurements.of_rows(rows, today, renamed).for_group([a, b], "work-conserving")) == {"crossover"}


def test_an_adaptive_group_starts_in_its_plans_better_way_and_runs_under_mps_where_that_is_mps():
    from xover.recipes import load_recipe
    from xover.run.batch import planned_under_mps
    from xover.run.jobs import job_for
    from xover.run.units import adaptive_prior

    jobs = [job_for(load_recipe("mlp-digits")), job_for(load_recipe("resnet-digits"))]
    turns_ahead = GroupToRun(0, jobs, sharing="adaptive", predicted_by_sharing={"crossover": 1.40, "concurrent": 1.36})
    assert adaptive_prior(turns_ahead) == "turns" and not turns_ahead.needs_mps
    [unit] = group_units(turns_ahead, ["planned"], ["work-conserving", "round-robin"])
    assert (unit.mode, unit.policy, unit.prior) == ("adaptive", "work-conserving", "turns")
    under_mps = GroupToRun(0, jobs, sharing="adaptive",
                           predicted_by_sharing={"crossover": 1.30, "concurrent": 1.10, "mps": 1.33})
    assert under_mps.best_without_turns == "mps" and under_mps.needs_mps and adaptive_prior(under_mps) == "free"
    assert planned_under_mps(under_mps, ["planned"]) and not planned_under_mps(under_mps, ["adaptive"])
    assert adaptive_prior(GroupToRun(0, jobs)) is None  # no plan: the controller starts without turns
    # --mode all runs it once, under the first policy
    units = group_units(GroupToRun(0, jobs), ["sequential", "concurrent", "crossover", "adaptive"],
                        ["work-conserving", "round-robin"])
    assert [(u.mode, u.policy) for u in units if u.mode == "adaptive"] == [("adaptive", "work-conserving")]


def test_a_plan_groups_by_what_its_jobs_measured_together_where_they_were_measured():
    # two compute-bound jobs: the fluid bound (1.05) does not clear the 5% margin, so a plan from profiles
    # alone runs them one after another; measured together at 1.36, the next plan groups them
    a, b = job("a", 100, 5), job("b", 100, 5)
    ids = {"a": JobIdentity("wa", 2, "horovod"), "b": JobIdentity("wb", 2, "horovod")}
    key = jobs_key([ids["a"], ids["b"]])
    hosts = [("localhost", 2)]
    assert [len(g.jobs) for g in make_plan([a, b], hosts).groups] == [1, 1]
    measured_well = Measurements(
        {key: {"crossover:work-conserving": MeasuredWay(1.30, (0.65, 0.65), "e1", "work-conserving"),
               "concurrent": MeasuredWay(1.36, (0.68, 0.68), "e1")}}, ids)
    [group] = make_plan([a, b], hosts, measured=measured_well).groups
    assert sorted(j.name for j in group.jobs) == ["a", "b"] and group.predicted_from["concurrent"] == "measured"
    # a complementary pair the bound groups, measured losing in every way: apart
    c, d = job("c", 100, 60), job("d", 60, 100)
    ids = {"c": JobIdentity("wc", 2, "horovod"), "d": JobIdentity("wd", 2, "horovod")}
    assert [len(g.jobs) for g in make_plan([c, d], hosts).groups] == [2]
    measured_losing = Measurements(
        {jobs_key(list(ids.values())): {"crossover:work-conserving": MeasuredWay(0.95, (0.5, 0.45), "e1", "work-conserving"),
                                        "concurrent": MeasuredWay(0.9, (0.45, 0.45), "e1")}}, ids)
    assert [len(g.jobs) for g in make_plan([c, d], hosts, measured=measured_losing).groups] == [1, 1]


def test_the_largest_group_is_the_most_jobs_one_turn_server_serves():
    """--max-group is bounded by what a group's turn server numbers: a larger group could be planned but not run."""
    from xover.sharing import MAX_GROUP
    from xover.turns.protocol import MAX_SLOTS

    assert MAX_GROUP == MAX_SLOTS == 254


def test_a_plan_that_learns_weighs_the_groups_not_measured_by_their_prediction_not_the_bound():
    """c and d measured 1.7 together; every pair not measured was weighed by its fluid bound (an upper limit: 2.0 for
    a + d and b + c), so the plan took a + d and b + c, predicted at 1.63 and 1.33, over c + d (measured 1.7) and
    a + b (2.0). Beyond `PREDICTED_GROUPING_JOBS` jobs the bound weighs them still (a simulation a group)."""
    from xover.plan.make import local_hosts

    jobs = [job("a", 100, 60, iterations=100), job("b", 60, 100, iterations=100),
            job("c", 100, 60, iterations=100, interference=0.6), job("d", 60, 100, iterations=100, interference=0.6)]
    ids = {one.name: JobIdentity(f"w{one.name}", 2, "horovod") for one in jobs}
    measured = Measurements({jobs_key([ids["c"], ids["d"]]): {
        "crossover:work-conserving": MeasuredWay(1.7, (0.85, 0.85), "e1", "work-conserving"),
        "concurrent": MeasuredWay(1.2, (0.6, 0.6), "e1")}}, ids)
    plan = make_plan(jobs, local_hosts(2), measured=measured)
    assert sorted(sorted(one.name for one in group.jobs) for group in plan.groups) == [["a", "b"], ["c", "d"]]
    assert sorted(round(group.predicted_gain, 2) for group in plan.groups) == [1.7, 2.0]
    from xover.plan.decide import PREDICTED_GROUPING_JOBS

    assert PREDICTED_GROUPING_JOBS >= 8  # what `xover plan` of a few devices' jobs is
