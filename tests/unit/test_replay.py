"""The replay (`xover simulate`): golden traces with timelines checked by hand, the policies' rules, the
placement rules, the trace formats, the figures, and the engine's invariants on random traces."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from xover.plan.instances import JobInstance
from xover.plan.model import JobProfile
from xover.plan.state import FreeDevices
from xover.plan.throughput import MURI_ALONE_FACTOR, InterleaveModel, Speeds, XoverModel, ideal_interleaved_ms
from xover.plan.trace import load_trace_csv
from xover.replay.engine import ReplayRules, replay
from xover.replay.metrics import jct_cdf, nearest_rank, summarise, utilisation_over_time
from xover.replay.policies import POLICIES, queue_of
from xover.replay.traces import TraceError, detect_format, load_trace, skipped_words

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "replay"
PROFILES = {profile.name: profile for profile in load_trace_csv(ASSETS / "profiles.csv")}
ONE_DEVICE = [("h", 1)]
TWO_DEVICES = [("h", 2)]


def golden(name: str) -> list[JobInstance]:
    return load_trace(ASSETS / name, profiles=PROFILES.get).instances


def timeline(outcome) -> dict[str, tuple[float, float]]:
    """job -> (first start, end)."""
    return {job.name: (job.start_s, job.end_s) for job in outcome.jobs}


def close(times: dict[str, tuple[float, float]], expected: dict[str, tuple[float, float]]) -> bool:
    """Every job's (start, end) as expected, to float rounding."""
    return times.keys() == expected.keys() and all(
        times[name] == pytest.approx(expected[name], abs=1e-6) for name in expected
    )


def run(trace: str, hosts, policy: str, model=None, **rules) -> dict[str, tuple[float, float]]:
    outcome = replay(golden(trace), hosts, POLICIES[policy], model or XoverModel(), ReplayRules(**rules))
    assert outcome.unfinished == []
    return timeline(outcome)


# ---------------------------------------------------------------- golden timelines, by hand


def test_fifo_holds_later_jobs_behind_the_first():
    # j0 takes both devices 0-100; j1 and j2 wait behind it and start together at 100.
    assert run("fifo_srtf.csv", TWO_DEVICES, "fifo") == {"j0": (0, 100), "j1": (100, 150), "j2": (100, 130)}


@pytest.mark.parametrize("reschedule", ["keep", "repack"])
def test_srtf_preempts_the_longer_job_and_resumes_it(reschedule):
    # t=10: j1 (50 left) goes before j0 (90 left): j0 stops, j1 starts on one device; t=20: j2 (30) takes the
    # other; j2 ends at 50, j1 at 60; j0 needs both devices, resumes at 60 with 90 s left and ends at 150.
    times = run("fifo_srtf.csv", TWO_DEVICES, "srtf", reschedule=reschedule)
    assert times == {"j0": (0, 150), "j1": (10, 60), "j2": (20, 50)}


@pytest.mark.parametrize("reschedule", ["keep", "repack"])
def test_tiresias_demotes_a_job_at_its_queues_limit(reschedule):
    # Limit 60 GPU-s: j1 arrives at 10 into j0's queue and waits (running jobs go first in their own queue);
    # at 60 j0 has had 60 GPU-s, drops a queue, and j1 takes the device 60-90; j0 resumes 90-130.
    times = run("tiresias.csv", ONE_DEVICE, "tiresias", reschedule=reschedule, tiresias_limits=(60.0,))
    assert times == {"j0": (0, 130), "j1": (60, 90)}


def test_a_restart_costs_a_job_its_restart_time_at_every_start_on_start():
    # The SRTF case with a 5 s restart: j0 0-5 restarting, works 5-10 (5 s done); j1 restarts 10-15 and works
    # 15-65; j2 restarts 20-25, works 25-55; j0 resumes at 65: restarts 65-70, 95 s left: ends at 165.
    instances = [
        JobInstance(job.name, job.kind, job.iterations, job.arrival_s, job.devices, restart_s=5.0)
        for job in golden("fifo_srtf.csv")
    ]
    outcome = replay(instances, TWO_DEVICES, POLICIES["srtf"], XoverModel(), ReplayRules())
    assert close(timeline(outcome), {"j0": (0, 165), "j1": (10, 65), "j2": (20, 55)})


@pytest.mark.parametrize("reschedule", ["keep", "repack"])
def test_xover_groups_the_job_next_in_line_with_the_running_one(reschedule):
    # One device. Alone, each loader job takes 100 s. Interleaved, the pair's ideal period is 100 ms (one's
    # data loading beside the other's compute and communication) times 1.25: each goes at 0.8. j1 arrives
    # at 10 and joins j0 (90 s left): j0 ends at 10 + 90 / 0.8 = 122.5; j1 has done 90 s of work by then and
    # ends alone at 132.5. SRSF without sharing: 0-100 and 100-200.
    model = InterleaveModel(factors=(1.25,))
    grouped = run("pair.csv", ONE_DEVICE, "xover", model, reschedule=reschedule)
    assert close(grouped, {"j0": (0, 122.5), "j1": (10, 132.5)})
    assert run("pair.csv", ONE_DEVICE, "srsf", model, reschedule=reschedule) == {"j0": (0, 100), "j1": (100, 200)}


def test_xover_shares_nothing_where_the_pair_would_lose():
    # At 1.6 the pair goes at 0.625 each: gain 1.25 - still a gain, formed; at 2.2, 0.45 each: lost, not formed.
    assert run("pair.csv", ONE_DEVICE, "xover", InterleaveModel(factors=(2.2,))) == {"j0": (0, 100), "j1": (100, 200)}


def test_muri_semantics_charge_every_running_job_its_restart_at_every_event():
    # Muri's CSV: 100 iterations of 1,000 ms, run at 1.015x alone (101.5 s); restart 10 s (a model Muri's
    # table does not list). At 50 s (j1 arrives) j0 has worked 40 s: 61.5 s left, ending at 111.5; j1
    # (101.5 s) waits, starts at 111.5 and ends at 213.
    instances = load_trace(ASSETS / "muri_two.csv").instances
    rules = ReplayRules(
        placement="first-fit", reschedule="repack", restart="every-event", alone_factor=MURI_ALONE_FACTOR
    )
    outcome = replay(instances, ONE_DEVICE, POLICIES["srtf"], InterleaveModel(), rules)
    assert close(timeline(outcome), {"job0": (0, 111.5), "job1": (111.5, 213)})
    assert summarise(outcome).avg_jct_s == pytest.approx((111.5 + 163) / 2)


# ---------------------------------------------------------------- a group kept only while it gains


class TableModel:
    """A model whose speeds are set by the test: groups by their jobs' kinds."""

    name = "table"

    def __init__(self, speeds: dict[tuple[str, ...], tuple[float, ...]]) -> None:
        self.speeds = speeds

    def predict(self, jobs):
        if len(jobs) == 1:
            return Speeds((1.0,), "alone", jobs[0].solo_ms)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].compute_ms)
        table = self.speeds[tuple(sorted(str(jobs[i].compute_ms) for i in order))]
        speeds = [0.0] * len(jobs)
        for rank, index in enumerate(order):
            speeds[index] = table[rank]
        gain = sum(speeds)
        return Speeds(tuple(speeds), "crossover", sum(job.solo_ms for job in jobs) / gain if gain else math.inf)

    def grouping_period_ms(self, jobs):
        speeds = self.predict(jobs)
        return speeds.period_ms

    def describe(self):
        return "a table"


def _kind(compute: float) -> JobProfile:
    return JobProfile(name=f"k{compute:g}", devices=1, compute_ms=compute, comm_ms=100 - compute, memory_gb=0)


def test_a_group_is_dissolved_when_a_job_leaves_and_the_rest_would_lose():
    # One device, kinds k10, k20, k30 (their compute). short (30 s) runs alone from 0; mid (150 s) comes at 1,
    # goes after it (srsf) and joins it (0.7 each); long (300 s) comes at 2 and joins them (0.6 each). short
    # has 28.3 s left at 2: it ends at 2 + 28.3 / 0.6 = 49.17. mid + long would go at 0.5 each (no better
    # than apart): the group is dissolved; mid (121 s left) goes first and keeps the device, long (271.7 s
    # left) waits for it and ends at 49.17 + 121 + 271.7.
    table = {
        ("10", "20", "30"): (0.6, 0.6, 0.6),
        ("10", "30"): (0.7, 0.7),
        ("20", "30"): (0.7, 0.7),
        ("10", "20"): (0.5, 0.5),
    }
    instances = [
        JobInstance("short", _kind(30), 300, 0.0),
        JobInstance("mid", _kind(10), 1500, 1.0),
        JobInstance("long", _kind(20), 3000, 2.0),
    ]
    outcome = replay(instances, ONE_DEVICE, POLICIES["xover"], TableModel(table), ReplayRules(max_group=3))
    end_short = 2 + (30 - 1 - 0.7) / 0.6
    mid_left = 150 - 0.7 - 0.6 * (end_short - 2)
    long_left = 300 - 0.6 * (end_short - 2)
    assert close(
        timeline(outcome),
        {"short": (0, end_short), "mid": (1, end_short + mid_left), "long": (2, end_short + mid_left + long_left)},
    )
    assert [job.preemptions for job in outcome.jobs] == [0, 0, 1]
    assert summarise(outcome).by_sharing.keys() == {"alone", "crossover"}


# ---------------------------------------------------------------- the policies


def test_policies_rank_as_they_say():
    srtf, srsf, tiresias = POLICIES["srtf"], POLICIES["srsf"], POLICIES["tiresias"]
    assert srtf.key_of(50, 8, 0, 0, 0) < srtf.key_of(60, 1, 0, 0, 0)
    assert srsf.key_of(50, 8, 0, 0, 0) > srsf.key_of(60, 1, 0, 0, 0)  # 400 GPU-s against 60
    assert tiresias.key_of(1e9, 1, 0, 5, 0) < tiresias.key_of(0, 1, 1, 1, 0)
    assert tiresias.preempts(tiresias.key_of(0, 1, 0, 9, 0), tiresias.key_of(0, 1, 1, 1, 0))
    assert not tiresias.preempts(tiresias.key_of(0, 1, 0, 1, 0), tiresias.key_of(0, 1, 0, 9, 0))
    assert not POLICIES["fifo"].preempts(0, 1)
    assert [queue_of(service) for service in (0, 3249, 3250, 7199, 7200, 1e9)] == [0, 0, 1, 1, 2, 2]


# ---------------------------------------------------------------- placement


def test_best_fit_places_as_xover_plan_places_a_wave():
    from xover.plan.placement import place_groups

    rng = random.Random(7)
    for _ in range(200):
        hosts = [(f"h{i}", rng.choice([1, 2, 4, 8])) for i in range(rng.randint(1, 5))]
        sizes = [rng.choice([1, 1, 2, 4, 8, 12]) for _ in range(rng.randint(1, 12))]
        sizes = [size for size in sizes if size <= sum(slots for _, slots in hosts)]
        jobs = [[JobProfile(f"j{i}", size, 10, 10, 0)] for i, size in enumerate(sizes)]
        wave0 = [group.devices for group in place_groups(jobs, hosts) if group.wave == 0]
        free = FreeDevices(hosts)
        now = [free.names(d) for d in (free.place(size) for size in sizes) if d is not None]
        assert now == wave0


def test_first_fit_takes_whole_hosts_for_a_job_bigger_than_one():
    free = FreeDevices([("a", 8), ("b", 8), ("c", 8)])
    assert free.names(free.place(1, "first-fit")) == ["a:0"]
    # a whole free host (b), and the rest on the first other host with room for it (a)
    assert free.names(free.place(12, "first-fit")) == [f"b:{i}" for i in range(8)] + ["a:1", "a:2", "a:3", "a:4"]
    assert free.place(16, "first-fit") is None  # only c is whole
    assert free.fits(11, "first-fit") and not free.fits(12, "first-fit")  # c and 3 of a; a has 3 left
    assert free.total_free == 24 - 13


def test_anywhere_counts_devices_only():
    free = FreeDevices([("a", 2), ("b", 2)])
    free.place(1, "anywhere")
    assert free.names(free.place(3, "anywhere")) == ["a:1", "b:0", "b:1"]
    assert free.place(1, "anywhere") is None and not free.fits(1)


def test_released_devices_are_free_again_in_order():
    free = FreeDevices([("a", 4)])
    first, second = free.place(2), free.place(2)
    free.release(first)
    assert free.largest_free == 2 and free.names(free.place(2)) == ["a:0", "a:1"]
    free.release(second)
    assert free.take_devices(((0, (2,)),)) == ((0, (2,)),) and free.free[0] == [3]


# ---------------------------------------------------------------- Muri's interleaving


def test_the_ideal_interleaving_of_two_loaders_by_hand():
    # Stages of 25 ms: one's 50 ms of data loading spans two while the other computes then communicates.
    assert ideal_interleaved_ms(((50.0, 25.0, 25.0), (50.0, 25.0, 25.0))) == pytest.approx(100.0)
    # Nothing to overlap: two GPU-only jobs take their computes one after the other.
    assert ideal_interleaved_ms(((0.0, 100.0, 0.0), (0.0, 100.0, 0.0))) == pytest.approx(200.0)


def test_interleave_speeds_use_the_trace_iteration_and_the_factors():
    job = JobProfile("a", 1, 25, 25, 0, data_ms=50)
    other = JobProfile("b", 1, 25, 25, 0, data_ms=50)
    model = InterleaveModel(factors=(1.33,), alone_factor=1.015, alone_ms={"a": 120.0})
    speeds = model.predict([job, other])
    period = 100 * 1.33 / 1.015
    assert speeds.speeds == pytest.approx((120 * 1.015 / period, 100 * 1.015 / period))
    assert speeds.sharing == "interleaved"
    assert model.group_iteration_ms([job, other, other]) == math.inf  # no factor for three


# ---------------------------------------------------------------- traces


def test_each_format_is_told_by_its_first_line(tmp_path):
    assert detect_format(ASSETS / "muri_two.csv") == "muri"
    assert detect_format(ASSETS / "pair.csv") == "plain"
    assert detect_format(ASSETS / "philly_log.json") == "philly"
    with pytest.raises(TraceError, match="profiles.csv: line 1: not a trace"):
        detect_format(ASSETS / "profiles.csv")
    for empty in (tmp_path / "empty.csv", tmp_path / "bom.csv"):  # they were 'not a trace this reads'
        empty.write_text("" if empty.name == "empty.csv" else "\ufeff\n")
        with pytest.raises(TraceError, match=f"{empty.name}: line 1: empty: a CSV trace starts with its header line"):
            detect_format(empty)
    # JSON may begin with blank lines (it was "line 1: empty"); a CSV's header is its first line, blank or not
    pretty = tmp_path / "pretty.json"
    pretty.write_text("\n  \n\t" + (ASSETS / "philly_log.json").read_text())
    assert detect_format(pretty) == "philly"
    assert load_trace(pretty, profiles=PROFILES.get, assign=["narrow"], seed=3).instances
    blank_csv = tmp_path / "blank.csv"
    blank_csv.write_text("\n" + (ASSETS / "pair.csv").read_text())
    with pytest.raises(TraceError, match="blank.csv: line 1: empty"):
        detect_format(blank_csv)


def test_a_muri_line_becomes_a_job_of_its_own_profile():
    first = load_trace(ASSETS / "muri_two.csv").instances[1]
    assert (first.name, first.arrival_s, first.iterations, first.gpus) == ("job1", 50.0, 100, 1)
    assert (first.kind.data_ms, first.kind.compute_ms, first.kind.comm_ms) == (500, 250, 250)
    assert first.alone_ms == 1000 and first.restart_s == 10.0 and first.work_s == 100.0


def test_philly_jobs_take_their_last_attempt_and_a_drawn_model():
    trace = load_trace(ASSETS / "philly_log.json", profiles=PROFILES.get, assign=["narrow"], seed=3)
    jobs = {job.name: job for job in trace.instances}
    assert set(jobs) == {"application_1_0001", "application_1_0003"}
    assert jobs["application_1_0001"].gpus == 2 and jobs["application_1_0001"].work_s == pytest.approx(100)
    assert jobs["application_1_0003"].arrival_s == 60 and jobs["application_1_0003"].work_s == pytest.approx(30)
    assert trace.skipped == {"jobs never started": 1}


def test_a_model_given_twice_to_assign_is_drawn_twice_as_often(tmp_path):
    [entry] = json.loads((ASSETS / "philly_log.json").read_text())[:1]
    path = tmp_path / "many.json"
    path.write_text(json.dumps([{**entry, "jobid": f"application_1_{index:04d}"} for index in range(600)]))
    trace = load_trace(path, profiles=PROFILES.get, assign=["loader", "narrow", "loader"], seed=5)
    drawn = [job.kind.name for job in trace.instances]
    assert len(drawn) == 600 and set(drawn) == {"loader", "narrow"}
    assert drawn.count("loader") / len(drawn) == pytest.approx(2 / 3, abs=0.06)  # 5 standard deviations


def test_a_philly_job_whose_gpus_are_not_a_list_is_skipped(tmp_path):
    """"gpus": "abcdefgh" was counted as 8 GPUs (a string's length)."""
    entries = json.loads((ASSETS / "philly_log.json").read_text())
    entries[0]["attempts"][-1]["detail"][0]["gpus"] = "abcdefgh"
    path = tmp_path / "philly.json"
    path.write_text(json.dumps(entries))
    trace = load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"], seed=3)
    assert {job.name for job in trace.instances} == {"application_1_0003"}
    assert trace.skipped == {"jobs never started": 1, "jobs whose GPUs are not lists": 1}


def test_a_philly_job_that_ends_before_it_starts_is_counted_apart_from_one_of_no_time(tmp_path):
    """A last attempt whose end_time is before its start_time was counted as a job that ran no time."""
    entries = json.loads((ASSETS / "philly_log.json").read_text())
    last = entries[-1]["attempts"][-1]
    last["end_time"] = "2017-10-07 00:00:00"
    assert last["start_time"] > last["end_time"]
    path = tmp_path / "philly.json"
    path.write_text(json.dumps(entries))
    trace = load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"], seed=3)
    assert trace.skipped["jobs that end before they start"] == 1, trace.skipped
    assert skipped_words("jobs that end before they start", 1) == "1 job that ends before it starts"


def test_an_entry_with_none_of_a_philly_jobs_keys_is_no_job_and_a_gpu_listed_twice_is_one(tmp_path):
    # `{}` read as "1 job never started"; "gpus": ["gpu0", "gpu0"] as two GPUs
    path = tmp_path / "philly.json"
    path.write_text("{}")
    with pytest.raises(TraceError) as refused:
        load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"])
    assert str(refused.value).endswith("no jobs in the trace (1 entry that is not a job)")
    entries = json.loads((ASSETS / "philly_log.json").read_text())
    started = [entry for entry in entries if entry.get("attempts")]
    detail = started[0]["attempts"][-1]["detail"][0]
    detail["gpus"] = [detail["gpus"][0]] * 2
    path.write_text(json.dumps(started[:1]))
    [job] = load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"], seed=3).instances
    assert job.gpus == 1


def test_what_a_philly_log_left_out_is_counted_in_words_singular_for_one(tmp_path):
    """"1 jobs never started": the reasons are counted under their plural, and said in the singular for one."""
    from xover.replay.traces import skipped_text

    assert skipped_text({"jobs never started": 1, "jobs whose GPUs are not lists": 2}) == (
        "1 job never started, 2 jobs whose GPUs are not lists")
    assert skipped_text({"entries that are not jobs": 1}) == "1 entry that is not a job"
    assert skipped_text({"a reason of an older xover": 1}) == "1 a reason of an older xover"  # as stored
    path = tmp_path / "philly.json"
    path.write_text(json.dumps([{"jobid": "a", "submitted_time": "2017-10-07 01:00:00", "attempts": []}, 7]))
    with pytest.raises(TraceError) as refused:
        load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"])
    assert str(refused.value).endswith("no jobs in the trace (1 job never started, 1 entry that is not a job)")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arrival_s,gpus,duration_s\n0,1,5\n", "line 1: missing column model"),
        ("", "line 1: empty, expected the header line: arrival_s,gpus,duration_s,model"),  # was "(columns: )"
        # the header was shown as written: a terminal ran an escape sequence in it
        ("arrival_s,gpus,\x1b[2Jmodel\n", r"missing column duration_s, model \(columns: arrival_s, gpus, '\\x1b\[2Jmodel'\)"),
        ("a," * 5000 + "b\n", r"missing column arrival_s, gpus, duration_s, model \(columns: a, a, (a, ){17}a, \.\.\.\)$"),
        ("\n0,1,5,narrow\n", "line 1: empty, expected the header line"),
        ("arrival_s,gpus,duration_s,model,colour\n", "line 1: unknown column 'colour'"),
        ("arrival_s,gpus,duration_s,model\n0,1,-5,narrow\n", "line 2: duration_s must be > 0, got -5"),
        # a row is told by its first line: a quoted model of two lines was told by its last
        ('arrival_s,gpus,duration_s,model\n0,1,-5,"nar\nrow"\n', "line 2: duration_s must be > 0, got -5"),
        # an arrival out of range was the first arrival: the line before it arrived at inf (a ValueError's
        # traceback), or the subtraction overflowed (decimal.Overflow)
        ("arrival_s,gpus,duration_s,model\n0,1,5,narrow\n-1e500,1,5,narrow\n", "line 3: arrival_s must be a finite number, got -1e500"),
        ("arrival_s,gpus,duration_s,model\n0,1,1e13,narrow\n", "line 2: duration_s 1e13 is out of range: at most 1e\\+12"),
        ("arrival_s,gpus,duration_s,model\n0,1,5,narrow\n-1e999999999,1,5,narrow\n", "line 3: arrival_s must be a finite number, got -1e999999999"),
        ("arrival_s,gpus,duration_s,model\n0,1.5,5,narrow\n", "line 2: gpus must be a whole number"),
        ("arrival_s,gpus,duration_s,model\n0,1,5,nosuch\n", "line 2: no profile of model 'nosuch'"),
        # a stored profile's recipe error repeated the name as written, escape sequence and all
        ("arrival_s,gpus,duration_s,model\n0,1,5,a\x1b[2J\n", r"line 2: model 'a\\x1b\[2J': no model's name holds a"),
        ("arrival_s,gpus,duration_s,model,name\n0,1,5,narrow,a\n1,1,5,narrow,a\n", "line 3: job name 'a' is used twice"),
        ("arrival_s,gpus,duration_s,model\n0,1,5\n", "line 2: 3 fields, the header has 4"),
        ("arrival_s,gpus,duration_s,model\n0\n", "line 2: 1 field, the header has 4"),
    ],
)
def test_a_bad_plain_trace_names_its_line_and_field(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        load_trace(path, "plain", profiles=PROFILES.get)


# ---------------------------------------------------------------- figures


def test_figures_of_a_replay():
    outcome = replay(golden("fifo_srtf.csv"), TWO_DEVICES, POLICIES["srtf"], XoverModel(), ReplayRules())
    summary = summarise(outcome)
    assert summary.avg_jct_s == pytest.approx((150 + 50 + 30) / 3)
    assert summary.median_jct_s == 50 and summary.p99_jct_s == 150
    assert summary.makespan_s == 150
    assert summary.avg_queue_s == 0
    # busy device-seconds: j0 2x10, j1 50, j2 30, j0 2x90 = 280 of 2 x 150
    assert summary.utilisation == pytest.approx(280 / 300)
    assert summary.grouped_share == 0 and summary.by_sharing == {"alone": 1.0}
    # 0-50: j0 2x10, j1 10, j1 + j2 2x30 = 90 of 100 device-s; 50-100: j1 10, j0 2x40 = 90; 100-150: j0 100
    points = utilisation_over_time(outcome, buckets=3)
    assert [round(point.busy, 9) for point in points] == [0.9, 0.9, 1.0]
    assert [round(point.running, 9) for point in points] == [round((10 + 10 + 60) / 50, 9), (10 + 40) / 50, 1.0]


def test_quantiles_and_the_jct_distribution():
    assert nearest_rank(list(range(1, 101)), 0.99) == 99
    assert nearest_rank([5.0], 0.99) == 5.0
    assert jct_cdf([3.0, 1.0, 2.0], points=10) == [(1.0, 1 / 3), (2.0, 2 / 3), (3.0, 1.0)]


# ---------------------------------------------------------------- invariants on random traces


def _random_trace(rng: random.Random, count: int) -> list[JobInstance]:
    kinds = [
        JobProfile("compute", 1, 90, 10, 0, data_ms=0),
        JobProfile("chatty", 1, 20, 80, 0, link_ms=80),
        JobProfile("loader", 1, 25, 25, 0, data_ms=50),
    ]
    jobs = []
    for index in range(count):
        kind = rng.choice(kinds)
        gpus = rng.choice([1, 1, 2, 4, 8])
        jobs.append(
            JobInstance(f"j{index}", kind, rng.randint(10, 5000), rng.uniform(0, 300), devices=gpus,
                        restart_s=rng.choice([0.0, 2.0]))
        )
    return jobs


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("reschedule", ["keep", "repack"])
def test_every_job_ends_no_sooner_than_alone_and_the_devices_are_never_oversubscribed(policy, reschedule):
    rng = random.Random(hash((policy, reschedule)) % 1000)
    instances = _random_trace(rng, 60)
    hosts = [("a", 8), ("b", 4)]
    model = InterleaveModel(factors=(1.1, 1.3, 1.2))
    outcome = replay(instances, hosts, POLICIES[policy], model, ReplayRules(reschedule=reschedule, max_group=3))
    assert outcome.unfinished == []
    for job in outcome.jobs:
        assert job.arrival_s <= job.start_s < job.end_s
        if not POLICIES[policy].groups:
            assert job.jct_s >= job.work_s - 1e-6
    assert max(outcome.timeline.busy) <= 12
    if not POLICIES[policy].groups:
        assert max(outcome.timeline.grouped) == 0
    assert sum(outcome.device_s_by_sharing.values()) <= 12 * summarise(outcome).makespan_s + 1e-6


@pytest.mark.parametrize("fmt", [None, "muri", "plain", "philly"])
def test_a_trace_that_names_a_device_or_a_folder_is_refused_before_it_is_read(tmp_path, fmt):
    """/dev/zero was read until memory ran out (a line that never ends); a folder said 'cannot read'."""
    from xover.replay.traces import TraceError, load_trace

    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(TraceError, match="not a regular file"):
            load_trace(path, fmt, profiles=lambda name: None, assign=("m",))


def test_a_plan_path_that_names_a_device_or_a_folder_is_refused_before_it_is_read(tmp_path):
    from xover.errors import XoverError
    from xover.run.targets import groups_from_plan

    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(XoverError, match="not a regular file"):
            groups_from_plan(path, None)


def test_a_profiles_trace_for_plan_that_names_a_device_is_refused_before_it_is_read(tmp_path):
    """`xover plan --profiles /dev/zero` read until it was stopped."""
    from xover.errors import XoverError

    for path in ("/dev/zero", tmp_path):
        with pytest.raises(XoverError, match="not a regular file"):
            load_trace_csv(path)


def test_a_philly_log_written_with_a_bom_is_read_as_a_csv_trace_is(tmp_path):
    """A BOM at a Philly log's start was refused in the decoder's words, where a CSV trace's is read."""
    path = tmp_path / "philly.json"
    path.write_bytes(b"\xef\xbb\xbf" + (ASSETS / "philly_log.json").read_bytes())
    assert detect_format(path) == "philly"
    with_bom = load_trace(path, profiles=PROFILES.get, assign=["narrow"], seed=3)
    plain = load_trace(ASSETS / "philly_log.json", profiles=PROFILES.get, assign=["narrow"], seed=3)
    assert [job.name for job in with_bom.instances] == [job.name for job in plain.instances] != []


def test_a_philly_job_that_gives_a_key_twice_is_refused_by_where_it_is(tmp_path):
    """json.loads kept the last "jobid" of a job silently; the job was replayed under the other name."""
    text = (ASSETS / "philly_log.json").read_text()
    path = tmp_path / "philly.json"
    path.write_text(text.replace('"jobid": "application_1_0003",', '"jobid": "application_1_0003", "jobid": "x",'))
    with pytest.raises(TraceError, match=r"philly.json: the key 'jobid' is given twice in \[2\] .*remove one of them"):
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])


@pytest.mark.parametrize("field", ["jobid", "submitted_time"])
def test_a_philly_integer_too_long_to_convert_is_refused_by_its_field(tmp_path, field):
    """An integer of more than 4,300 digits was Python's "Exceeds the limit (4300 digits)", naming no field (and
    a traceback)."""
    entries = json.loads((ASSETS / "philly_log.json").read_text())
    entries[2][field] = "LONG"
    path = tmp_path / "philly.json"
    path.write_text(json.dumps(entries).replace('"LONG"', "9" * 5000))
    with pytest.raises(TraceError, match=rf"philly.json: \[2\]\.{field}: an integer of 5000 digits"):
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])
    entries[2][field] = "LONG"
    entries[2]["attempts"][0]["detail"][0]["gpus"] = ["LONG"]  # deeper, in a list: named as deep
    path.write_text(json.dumps(entries).replace('["LONG"]', "[" + "9" * 5000 + "]").replace('"LONG"', '"x"'))
    with pytest.raises(TraceError, match=r"\[2\]\.attempts\[0\]\.detail\[0\]\.gpus\[0\]: an integer of 5000"):
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])


def test_a_philly_log_nested_deeply_but_readable_is_read_without_a_recursion_error(tmp_path):
    """The search for an over-long integer must not recurse: the parser reads nesting that deep."""
    path = tmp_path / "philly.json"
    path.write_text("[" * 600 + "]" * 600)
    with pytest.raises(TraceError, match="no jobs in the trace \\(1 entry that is not a job\\)"):
        load_trace(path, "philly", profiles=PROFILES.get, assign=["narrow"])


def test_a_key_of_a_philly_log_is_shown_escaped_where_it_names_a_place(tmp_path):
    """A key with a terminal's escape sequence was printed as it is in 'the key ... is given twice in ...': the
    terminal ran it (it cleared the screen)."""
    text = (ASSETS / "philly_log.json").read_text()
    path = tmp_path / "philly.json"
    path.write_text(text.replace('"user": "u",', '"user": "u", "a\\u001b[2J": {"z": 1, "z": 2},', 1))
    with pytest.raises(TraceError) as refused:
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])
    assert "the key 'z' is given twice in [0]['a\\x1b[2J']" in str(refused.value)
    assert "\x1b" not in str(refused.value)
    path.write_text(text.replace('"user": "u",', f'"user": "u", "{"k" * 50}": [{"9" * 5000}],', 1))
    with pytest.raises(TraceError, match=r"\[0\]\['k{40}'\.\.\.\]\[0\]: an integer of 5000 digits"):
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])


def test_a_trace_of_one_endless_line_is_refused_without_reading_it_whole(tmp_path):
    """A sparse file of NULs (UTF-8 text, no newline) was read whole into memory (a trace, or a profiles CSV: 700 MB
    for a file of 300 MB), and a first field over csv's limit (131,072 characters) was csv.Error's traceback when
    the format was told from the header."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,gpus,duration_s,model\n" + "\0" * 1_500_000)
    with pytest.raises(TraceError, match="t.csv: line 2: longer than 1,000,000 characters: not a CSV file of a row a line"):
        load_trace(path, "plain", profiles=PROFILES.get)
    path.write_text("x" * 200_000 + "\n")
    with pytest.raises(TraceError, match="t.csv: line 1: not a trace this reads"):
        detect_format(path)
    from xover.errors import XoverError

    path.write_text("name,devices,compute_ms,comm_ms,memory_gb\n" + "\0" * 1_500_000)  # as --profiles
    with pytest.raises(XoverError, match="t.csv: line 2: longer than 1,000,000 characters"):
        load_trace_csv(path)


def test_a_utf16_trace_is_told_to_be_converted(tmp_path):
    """A spreadsheet's 'Unicode text' (UTF-16, with its BOM) was 'not a UTF-8 text file', with nothing to do."""
    path = tmp_path / "pair.csv"
    path.write_text((ASSETS / "pair.csv").read_text(), encoding="utf-16")
    with pytest.raises(TraceError, match=r"pair.csv: not a UTF-8 text file \(UTF-16: convert it first, e.g. iconv"):
        load_trace(path, profiles=PROFILES.get)


def test_a_compressed_trace_is_told_to_be_decompressed(tmp_path):
    import gzip

    from xover.replay.traces import TraceError

    path = tmp_path / "pair.csv.gz"
    path.write_bytes(gzip.compress((ASSETS / "pair.csv").read_bytes()))
    with pytest.raises(TraceError, match=r"pair.csv.gz: not a UTF-8 text file \(compressed with gzip: gunzip it first\)"):
        load_trace(path, profiles=PROFILES.get)


# ---------------------------------------------------------------- names, times and figures the reviewer found wrong


def test_a_philly_job_without_a_usable_id_gets_a_name_no_other_job_has(tmp_path):
    """A job whose jobid was unusable was named job<index>, which another job's real jobid could be: the
    replay then mixed the two up (xover under Muri's semantics looped for ever, srtf got wrong figures)."""
    entries = [
        {"jobid": jobid, "submitted_time": f"2017-10-07 01:00:{at:02d}",
         "attempts": [{"start_time": f"2017-10-07 01:00:{at:02d}", "end_time": f"2017-10-07 01:0{end}:00",
                       "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}
        for jobid, at, end in (("job1", 0, 2), ("bad id", 10, 1), ("x3", 20, 1), ("x3", 30, 1))
    ]
    path = tmp_path / "philly.json"
    path.write_text(json.dumps(entries))
    instances = load_trace(path, profiles=PROFILES.get, assign=["narrow"]).instances
    assert [job.name for job in instances] == ["job1", "job1-2", "x3", "job3"]
    for jobid, name in ((None, "job0"), (True, "job0"), (7, "7")):  # null was named "None", true "True"
        path.write_text(json.dumps([{**entries[0], "jobid": jobid}]))
        assert [job.name for job in load_trace(path, profiles=PROFILES.get, assign=["narrow"]).instances] == [name]
    rules = ReplayRules(reschedule="repack", restart="every-event")
    outcome = replay(instances, ONE_DEVICE, POLICIES["xover"], InterleaveModel(), rules)
    assert outcome.unfinished == []


def test_a_generated_plain_name_avoids_the_names_the_trace_gives_further_down(tmp_path):
    """An unnamed job on line 3 was named job1, which line 2 named: 'line 3: job name 'job1' is used twice',
    a name the user never wrote there."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,gpus,duration_s,model,name\n0,1,10,narrow,\n1,1,10,narrow,job0\n2,1,10,narrow,job1\n")
    names = [job.name for job in load_trace(path, profiles=PROFILES.get).instances]
    assert names == ["job0-2", "job0", "job1"]


def test_a_muri_job_id_given_twice_is_named_as_the_trace_writes_it(tmp_path):
    path = tmp_path / "muri.csv"
    lines = (ASSETS / "muri_two.csv").read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1], lines[1]]) + "\n")
    with pytest.raises(TraceError, match="line 3: job_id '0' is used twice \\(first on line 2\\)"):
        load_trace(path)


def test_a_muri_job_whose_length_is_absurd_is_refused(tmp_path):
    """Each field in range, their product not: 1e12 iterations of 1e12 ms were replayed as JCTs of 10^21 s."""
    path = tmp_path / "muri.csv"
    lines = (ASSETS / "muri_two.csv").read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1], "1,1,50000,1000000000000,toy,1,1,0,1000000000000,500,250,250,0"]))
    with pytest.raises(TraceError, match=r"line 3: iterations x iteration_time is 1e\+21 s, more than 1e\+12 s"):
        load_trace(path)


def test_the_replay_refuses_two_jobs_of_one_name():
    """The planning core tells jobs apart by name: two of one name were mixed up, or looped for ever."""
    narrow = PROFILES["narrow"]
    instances = [JobInstance("a", narrow, 100, 0.0), JobInstance("a", narrow, 100, 5.0)]
    with pytest.raises(ValueError, match="two jobs are named 'a'"):
        replay(instances, ONE_DEVICE, POLICIES["srtf"], XoverModel(), ReplayRules())


SHIFT_S = 1507338000  # a Unix timestamp (2017-10-07), as Philly's and other clusters' logs give arrivals


def _shifted_plain_traces(tmp_path: Path) -> tuple[Path, Path]:
    rng = random.Random(7)
    rows = []
    at = 0.0
    for index in range(40):
        at += rng.choice([0.0, 0.2, 0.4, 1.0, rng.uniform(0, 30)])
        rows.append((round(at, 3), rng.choice([1, 1, 2]), round(rng.uniform(0.5, 80), 3), rng.choice(["narrow", "loader"]), f"e{index}"))
    header = "arrival_s,gpus,duration_s,model,name\n"
    relative, shifted = tmp_path / "relative.csv", tmp_path / "shifted.csv"
    relative.write_text(header + "".join(f"{a},{g},{d},{m},{n}\n" for a, g, d, m, n in rows))
    shifted.write_text(header + "".join(f"{SHIFT_S + a:.3f},{g},{d},{m},{n}\n" for a, g, d, m, n in rows))
    return relative, shifted


@pytest.mark.parametrize("policy", ["fifo", "srtf", "tiresias", "xover", "xover-las"])
@pytest.mark.parametrize("semantics", [{}, {"reschedule": "repack", "restart": "every-event", "alone_factor": 1.015}])
def test_a_trace_shifted_in_time_gives_the_same_jobs_times(tmp_path, policy, semantics):
    """Events closer than 1e-9 of the clock were one: at Unix timestamps (1.5e9 s) 1.5 s apart, so jobs
    started before they arrived and a shifted trace replayed differently. Times are now from the first
    arrival, subtracted as written (1507338005.435 is no float)."""
    relative, shifted = _shifted_plain_traces(tmp_path)
    outcomes = []
    for path in (relative, shifted):
        trace = load_trace(path, profiles=PROFILES.get, restart_s=2.0)
        outcome = replay(trace.instances, TWO_DEVICES, POLICIES[policy], XoverModel(), ReplayRules(**semantics))
        assert outcome.unfinished == []
        outcomes.append({job.name: (job.arrival_s, job.start_s, job.jct_s) for job in outcome.jobs})
    assert outcomes[0] == outcomes[1]
    assert load_trace(shifted, profiles=PROFILES.get).notes == [
        f"times are from the first arrival, at {SHIFT_S + float(relative.read_text().splitlines()[1].split(',')[0]):.15g} s of the trace"
    ]


def test_a_muri_trace_shifted_in_time_gives_the_same_jobs_times(tmp_path):
    lines = (ASSETS / "muri_two.csv").read_text().splitlines()
    shifted = [lines[0]] + [
        ",".join(cells[:2] + [str(SHIFT_S + int(cells[2]))] + cells[3:])  # ms: 17 days on
        for cells in (line.split(",") for line in lines[1:])
    ]
    path = tmp_path / "muri.csv"
    path.write_text("\n".join(shifted) + "\n")
    assert [job.arrival_s for job in load_trace(path).instances] == [0.0, 50.0]


def test_no_job_starts_before_it_arrives_on_a_clock_of_unix_timestamps():
    """The engine given timestamps itself (not through a trace reader): jobs 1 s and 0.2 s apart were one
    event, and a 1 s job arriving at t + 1.2 started at t + 1 (negative queueing)."""
    narrow = PROFILES["narrow"]  # 100 ms an iteration
    instances = [
        JobInstance("e0", narrow, 10, SHIFT_S + 0.0),
        JobInstance("e1", narrow, 10, SHIFT_S + 1.0),
        JobInstance("e2", narrow, 5, SHIFT_S + 1.2),
    ]
    for policy in ("fifo", "srtf"):
        outcome = replay(instances, ONE_DEVICE, POLICIES[policy], XoverModel(), ReplayRules())
        for job in outcome.jobs:
            assert job.start_s >= job.arrival_s and job.jct_s >= job.work_s - 1e-6


def test_the_grouped_share_is_all_when_every_busy_second_was_in_groups(tmp_path):
    """It was 0: the share alone defaulted to 1 where no device-second was alone."""
    path = tmp_path / "pair.csv"
    path.write_text("arrival_s,gpus,duration_s,model,name\n0,1,100,loader,p0\n0,1,100,loader,p1\n")
    outcome = replay(load_trace(path, profiles=PROFILES.get).instances, ONE_DEVICE, POLICIES["xover"],
                     InterleaveModel(factors=(1.25,)), ReplayRules())
    assert "alone" not in outcome.device_s_by_sharing
    assert summarise(outcome).grouped_share == 1.0


def test_utilisation_over_time_is_never_above_all_the_devices():
    """Float sums of spans at timestamps gave points of 1.0000000281."""
    from xover.replay.engine import JobOutcome, ReplayOutcome, Timeline

    timeline = Timeline()
    for offset, running in ((0.0, 1), (7.3, 2), (1000.1, 1)):
        timeline.add(SHIFT_S + offset, 1, 1, 0, running)
    job = JobOutcome("a", "k", 1, SHIFT_S, 1.0, SHIFT_S, SHIFT_S + 2239.934)
    points = utilisation_over_time(ReplayOutcome("p", 1, [job], timeline, {"interleaved": 1.0}, 1))
    assert max(point.busy for point in points) <= 1.0 and max(point.grouped for point in points) <= 1.0


def test_a_header_of_quoted_names_is_told_a_plain_trace(tmp_path):
    """As csv.QUOTE_ALL writes it: refused as 'not a trace this reads' (the head was split on commas)."""
    path = tmp_path / "quoted.csv"
    path.write_text('"arrival_s","gpus","duration_s","model","name"\n"0","1","100","narrow","j0"\n')
    assert detect_format(path) == "plain"
    assert [job.name for job in load_trace(path, profiles=PROFILES.get).instances] == ["j0"]


def test_the_interleave_model_itself_refuses_a_factor_below_one():
    """The command refuses --factors below 1; the model a library user builds does too (0.5 ran groups faster
    than their jobs' resources allow)."""
    with pytest.raises(ValueError, match="numbers >= 1"):
        InterleaveModel(factors=(1.2, 0.5))
    assert InterleaveModel(factors=(1.0,)).factors == (1.0,)


# ---------------------------------------------------------------- traces as operators have them

# Helios' cluster_log.csv as HeliosData's README publishes it (its three example rows), with a CPU job (Helios logs
# every Slurm job; gpu_num 0), a job that ran no time and one without a duration
HELIOS = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
    "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n"
    "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0\n"
    "1425513,uzqls,vcpDC,1,1,1,CANCELLED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-17 14:15:21,675233,0\n"
    "1425514,uzqls,vcpDC,0,8,1,COMPLETED,2020-06-09 18:42:00,2020-06-09 18:42:00,2020-06-09 18:52:00,600,0\n"
    "1425515,uzqls,vcpDC,2,8,1,CANCELLED,2020-06-09 18:42:30,2020-06-09 18:42:30,2020-06-09 18:42:30,0,0\n"
    "1425516,uzqls,vcpDC,2,8,1,CANCELLED,2020-06-09 18:43:00,,,,\n"
)


def test_helios_cluster_log_is_told_by_its_header_and_replays_its_gpu_jobs(tmp_path):
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    assert detect_format(path) == "helios"
    trace = load_trace(path, profiles=PROFILES.get, assign=["narrow"], seed=3, restart_s=2)
    jobs = {job.name: job for job in trace.instances}
    assert list(jobs) == ["1425511", "1425512", "1425513"]  # by arrival, named by job_id
    assert [job.arrival_s for job in jobs.values()] == [0, 26, 27]
    assert [job.gpus for job in jobs.values()] == [1, 4, 1]
    # its duration (s) run alone: narrow's 100 ms iterations
    assert [job.work_s for job in jobs.values()] == pytest.approx([36848, 249, 675233])
    assert all(job.kind.name == "narrow" and job.restart_s == 2 for job in jobs.values())
    assert trace.format == "helios"
    assert trace.skipped == {"CPU jobs (on no GPU)": 1, "jobs that ran no time": 1, "jobs without times": 1}
    assert trace.notes == [
        "models drawn from narrow with seed 3 (Helios names none)",
        "times are from the first arrival, at 1591728061 s of the trace (2020-06-09 18:41:01 UTC)",
    ]
    with pytest.raises(TraceError, match="Helios' cluster_log.csv names no model: give --assign"):
        load_trace(path, profiles=PROFILES.get)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("9,u,v,1,1,1,COMPLETED,09/06/2020 18:41,,,5,0", r"line 3: submit_time: not a time: '09/06/2020 18:41'"),
        ("9,u,v,1,1,1,COMPLETED,,,,5,0", "line 3: submit_time is empty"),
        ("9,u,v,one,1,1,COMPLETED,2020-06-09 18:41:01,,,5,0", "line 3: gpu_num must be a number, got 'one'"),
        ("9,u,v,1.5,1,1,COMPLETED,2020-06-09 18:41:01,,,5,0", "line 3: gpu_num must be a whole number"),
        ("9,u,v,1,1,1,COMPLETED,2020-06-09 18:41:01,,,-5,0", "line 3: duration must be >= 0, got -5"),
        ("9,u,v,1,1,1,COMPLETED,2020-06-09 18:41:01,,,nan,0", "line 3: duration must be a finite number, got nan"),
    ],
)
def test_a_bad_helios_line_names_its_line_and_field(tmp_path, row, message):
    path = tmp_path / "cluster_log.csv"
    path.write_text("\n".join(HELIOS.splitlines()[:2] + [row]) + "\n")
    with pytest.raises(TraceError, match=message):
        load_trace(path, profiles=PROFILES.get, assign=["narrow"])


def test_philly_as_its_readme_gives_it_two_attempts_two_machines_and_none(tmp_path):
    """The README's example entry (two attempts; the last one's GPUs and length), a job on two machines (their
    GPUs summed), a last attempt whose end is "None" (still running when the log was taken: the README) and
    one whose times are null."""
    def attempt(start, end, *machines):
        return {"start_time": start, "end_time": end, "detail": [{"ip": ip, "gpus": [f"gpu{i}" for i in range(8)]}
                                                                 for ip in machines]}
    entries = [
        {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199", "user": "ce2f4c",
         "submitted_time": "2017-10-07 01:11:39",
         "attempts": [attempt("2017-10-07 01:12:09", "2017-10-07 01:13:23", "m47"),
                      attempt("2017-10-07 01:13:30", "2017-10-09 06:53:12", "m412")]},
        {"status": "Failed", "vc": "b", "jobid": "two_machines", "user": "u", "submitted_time": "2017-10-07 02:00:00",
         "attempts": [attempt("2017-10-07 02:00:00", "2017-10-07 02:30:00", "m1", "m2")]},
        {"status": "Killed", "vc": "b", "jobid": "running", "user": "u", "submitted_time": "2017-10-07 03:00:00",
         "attempts": [attempt("2017-10-07 03:00:00", "None", "m3")]},
        {"status": "Killed", "vc": "b", "jobid": "null", "user": "u", "submitted_time": "2017-10-07 03:00:00",
         "attempts": [attempt(None, None, "m3")]},
    ]
    path = tmp_path / "cluster_job_log"
    path.write_text(json.dumps(entries, indent=4))
    trace = load_trace(path, profiles=PROFILES.get, assign=["narrow"])
    readme, machines = trace.instances
    assert readme.gpus == 8 and readme.work_s == pytest.approx(2 * 86400 + 5 * 3600 + 39 * 60 + 42)
    assert machines.gpus == 16 and machines.work_s == pytest.approx(1800) and machines.arrival_s == 2901
    assert trace.skipped == {"jobs still running at the log's end": 1, "jobs without times": 1}


@pytest.mark.parametrize(
    ("times", "message"),
    [
        # ISO 8601 forms are read: T, a fraction, an offset, Z (an offset moves the time: 02:00-07:00 is 09:00 UTC)
        (("2017-10-07T01:00:00", "2017-10-07T01:00:00.5", "2017-10-07T01:01:40.5"), None),
        (("2017-10-07 01:00:00Z", "2017-10-07 01:00:00+00:00", "2017-10-06 18:01:40-07:00"), None),
        # another form was "no jobs in the trace (1 job without times)": now the field and what to write
        (("2017-10-07 01:00:00 PDT", "2017-10-07 01:00:00", "2017-10-07 01:01:40"),
         r"\[0\].submitted_time: not a time: '2017-10-07 01:00:00 PDT': write it as 2017-10-07 01:12:09 \(a time "
         r"zone's name is not read: give an offset, e.g. -07:00\)"),
        (("2017-10-07 01:00:00", "10/07/2017 01:00", "2017-10-07 01:01:40"),
         r"\[0\].attempts\[0\].start_time: not a time: '10/07/2017 01:00'"),
        (("2017-10-07 01:00:00", "2017-10-07 01:00:00", 1507338100), r"\[0\].attempts\[0\].end_time: not a time"),
    ],
)
def test_a_philly_time_is_read_in_iso_forms_and_another_form_is_named(tmp_path, times, message):
    submitted, start, end = times
    path = tmp_path / "log.json"
    path.write_text(json.dumps([{"jobid": "a", "submitted_time": submitted, "attempts": [
        {"start_time": start, "end_time": end, "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}]))
    if message is None:
        [job] = load_trace(path, profiles=PROFILES.get, assign=["narrow"]).instances
        assert job.work_s == pytest.approx(100)
    else:
        with pytest.raises(TraceError, match=f"log.json: {message}"):
            load_trace(path, profiles=PROFILES.get, assign=["narrow"])


def test_a_spreadsheets_export_is_read_as_the_plain_csv(tmp_path):
    """A BOM, CRLF, ';' or tabs for commas (where ',' is the decimal point), capitalised column names, empty columns
    at the end and blank lines after the last job: each was 'not a trace this reads' or "column '' appears twice"."""
    expected = [(job.name, job.arrival_s, job.gpus, job.iterations) for job in golden("pair.csv")]
    exports = {
        "bom_crlf": "\ufeffarrival_s,gpus,duration_s,model,name\r\n0,1,100,loader,j0\r\n10,1,100,loader,j1\r\n\r\n\r\n",
        "semicolons": "arrival_s;gpus;duration_s;model;name\n0;1;100;loader;j0\n10;1;100;loader;j1\n",
        "tabs": "arrival_s\tgpus\tduration_s\tmodel\tname\n0\t1\t100\tloader\tj0\n10\t1\t100\tloader\tj1\n",
        "capitals": "Arrival_s,GPUs,Duration_s,Model,Name\n0,1,100,loader,j0\n10,1,100,loader,j1\n",
        "trailing": "arrival_s,gpus,duration_s,model,name,,\n0,1,100,loader,j0,,\n10,1,100,loader,j1\n",
        "quoted": '"arrival_s";"gpus";"duration_s";"model";"name"\n"0";"1";"100";"loader";"j0"\n"10";"1";"100";"loader";"j1"\n',
    }
    for name, text in exports.items():
        path = tmp_path / f"{name}.csv"
        path.write_bytes(text.encode())
        assert detect_format(path) == "plain", name
        trace = load_trace(path, profiles=PROFILES.get)
        assert [(job.name, job.arrival_s, job.gpus, job.iterations) for job in trace.instances] == expected, name
    # an empty column is left out only at the end, and only where it is empty
    path = tmp_path / "more.csv"
    path.write_text("arrival_s,gpus,duration_s,model,name,,\n0,1,100,loader,j0,,x\n")
    with pytest.raises(TraceError, match="line 2: 7 fields, the header has 5"):
        load_trace(path, profiles=PROFILES.get)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'0,1,"1,000",loader\n', r"line 2: duration_s must be a number, got '1,000': write it without thousands"),
        (b"0,1,1\xc2\xa0000,loader\n", r"got '1\\xa0000': write it without thousands separators"),
        (b"0,1,1e3x,loader\n", r"line 2: duration_s must be a number, got '1e3x'$"),
        # not UTF-8 (a spreadsheet's Windows-1252): the line and the byte, and how to convert it
        (b"0,1,10,loader\n0,1,10,caf\xe9\n", r"line 3: byte 0xe9 is not UTF-8: save the trace as UTF-8 \(e.g. iconv"),
    ],
)
def test_a_number_with_separators_or_a_byte_not_utf8_is_said_with_what_to_do(tmp_path, data, message):
    path = tmp_path / "t.csv"
    path.write_bytes(b"arrival_s,gpus,duration_s,model\n" + data)
    with pytest.raises(TraceError, match=message):
        load_trace(path, "plain", profiles=PROFILES.get)


def test_a_csv_trace_of_its_header_alone_says_so(tmp_path):
    """A header line and blank lines after it (a spreadsheet's empty sheet) was 'no jobs in the trace' alone."""
    for fmt, header in (("plain", "arrival_s,gpus,duration_s,model"), ("helios", HELIOS.splitlines()[0])):
        path = tmp_path / f"{fmt}.csv"
        path.write_text(header + "\r\n\r\n,,,\r\n" if fmt == "plain" else header + "\n")
        with pytest.raises(TraceError, match=r"no jobs in the trace \(only its header line: give a line a job after"):
            load_trace(path, profiles=PROFILES.get, assign=["narrow"] if fmt == "helios" else ())


def test_helios_all_clusters_log_with_its_cluster_column_is_read(tmp_path):
    """HeliosArtifact's all_cluster_log.csv is the clusters' logs in one with a `cluster` column (it was refused
    as an unknown column); a job id two clusters share is two jobs, the second renamed."""
    header, first, second = HELIOS.splitlines()[:3]
    path = tmp_path / "all_cluster_log.csv"
    path.write_text(f"{header},cluster\n{first},Venus\n{second},Earth\n{first.replace('18:41:01', '18:42:01')},Saturn\n")
    assert detect_format(path) == "helios"
    trace = load_trace(path, profiles=PROFILES.get, assign=["narrow"], seed=3)
    names = [job.name for job in trace.instances]
    assert len(names) == 3 and len(set(names)) == 3 and names[:2] == ["1425511", "1425512"]


# ---------------------------------------------------------------- reading a long trace: its progress


@pytest.mark.parametrize("fmt", ["plain", "philly", "helios"])
def test_reading_a_long_trace_tells_its_progress_and_a_short_one_tells_nothing(tmp_path, monkeypatch, fmt):
    """A 117,000-job Philly log took 6 s to read with nothing on screen: a trace of LONG_TRACE_BYTES or more
    tells the entries read every READ_REPORT_EVERY, from before its file is parsed (how many in all not known
    yet) to the end."""
    from xover.replay import traces

    count = 5000
    if fmt == "plain":
        path = tmp_path / "long.csv"
        path.write_text("arrival_s,gpus,duration_s,model\n" + "".join(f"{i},1,100,narrow\n" for i in range(count)))
    elif fmt == "philly":
        [entry] = json.loads((ASSETS / "philly_log.json").read_text())[:1]
        path = tmp_path / "long.json"
        path.write_text(json.dumps([{**entry, "jobid": f"j{i}"} for i in range(count)]))
    else:
        path = tmp_path / "cluster_log.csv"
        path.write_text(
            "job_id,gpu_num,submit_time,duration\n"
            + "".join(f"j{i},1,2020-04-01 00:00:00,100\n" for i in range(count))
        )
    calls: list[tuple[int, int | None]] = []
    read = load_trace(path, profiles=PROFILES.get, assign=["narrow"], progress=lambda *call: calls.append(call))
    assert len(read.instances) == count and calls == []  # a short trace: nothing flashes by
    monkeypatch.setattr(traces, "LONG_TRACE_BYTES", path.stat().st_size)
    load_trace(path, profiles=PROFILES.get, assign=["narrow"], progress=lambda *call: calls.append(call))
    total = None if fmt == "helios" else count  # Helios' log is read as it goes: its length is not known before
    assert calls == [(0, None), (2048, total), (4096, total), (count, count)]


# ---------------------------------------------------------------- the replay's outcome, kept to the bit

# sha256 (first 16 hex digits) of every policy's replay of `_digest`'s trace, taken at 254a4ff (before a
# group's speeds were asked once per kinds of jobs): a change meant only to speed the replay up leaves every
# one as it is; one meant to change outcomes says so and takes them anew.
REPLAY_DIGESTS = {
    "xover": {
        "fifo": "1b6373e5e28c5b41",
        "srtf": "26dad22b1d75d53d",
        "srsf": "94e27fd4ce05b2d4",
        "tiresias": "3458e15e8ac9544e",
        "xover": "66b58f3f4a2c6087",
        "xover-las": "e8fa996de9fe79b0",
    },
    "interleave": {
        "fifo": "1b6373e5e28c5b41",
        "srtf": "26dad22b1d75d53d",
        "srsf": "94e27fd4ce05b2d4",
        "tiresias": "3458e15e8ac9544e",
        "xover": "492b827647055c92",
        "xover-las": "ecb10631959599f7",
    },
}


def _digest(policy: str, model) -> str:
    """Every job's times, preemptions and grouped time, the timeline, device-seconds by sharing, the events and
    the summary of one replay of 300 Philly-like jobs (bench/replay_scale.py's draw, seed 0) at 3x the capacity
    of 4 hosts of 8 devices: long queues, every policy's paths taken."""
    import hashlib

    from bench.replay_scale import philly_like

    outcome = replay(philly_like(300, 4, 3.0, 0), [(f"n{i}", 8) for i in range(4)], POLICIES[policy], model)
    digest = hashlib.sha256()
    for job in outcome.jobs:
        digest.update(repr((job.name, job.kind, job.gpus, job.arrival_s, job.work_s, job.start_s, job.end_s,
                            job.preemptions, job.grouped_s)).encode())
    line = outcome.timeline
    digest.update(repr((list(line.time_s), list(line.busy), list(line.grouped), list(line.waiting),
                        list(line.running))).encode())
    digest.update(repr((sorted(outcome.device_s_by_sharing.items()), outcome.events, outcome.unfinished)).encode())
    digest.update(repr(summarise(outcome).to_json()).encode())
    return digest.hexdigest()[:16]


@pytest.mark.parametrize("model", ["xover", "interleave"])
def test_every_policys_replay_of_a_long_queue_is_what_it_was(model):
    throughput = XoverModel() if model == "xover" else InterleaveModel()
    assert {policy: _digest(policy, throughput) for policy in POLICIES} == REPLAY_DIGESTS[model]


def test_a_column_of_seconds_with_times_under_ten_shows_two_decimals():
    """Jobs shorter than a second read a JCT of 0 in `simulate`'s table (a probe session, 2026-12-06)."""
    from xover.report.simulation import DIGITS, shown_digits

    rows = [{"policy": "fifo", "avg_jct_s": 0.44, "makespan_s": 5000.0, "avg_queue_s": 0.0}]
    digits = shown_digits(rows)
    assert digits["avg_jct_s"] == 2 and digits["makespan_s"] == 0 and digits["avg_queue_s"] == 0
    assert shown_digits([{"avg_jct_s": 1234.5}]) == DIGITS


def test_a_quote_never_closed_in_a_plain_trace_is_named_not_only_counted(tmp_path):
    """A probe, 2026-12-07: a value whose quote was never closed ran on to the file's end, and the refusal said
    only '1 field, the header has 4'."""
    path = tmp_path / "trace.csv"
    path.write_text('arrival_s,gpus,duration_s,model\n0,1,100,mlp-synthetic\n5,1,"200,mlp-synthetic\n9,1,50,x\n')
    with pytest.raises(TraceError, match=r"line 3: 3 fields, the header has 4: a quoted value runs on to line 4 "
                                         r"\(a quote not closed\?\)"):
        load_trace(path, profiles=PROFILES.get)


@pytest.mark.parametrize(("header", "said"), [
    ("arrival_s,gpus,model", "a plain CSV without its column duration_s (columns: arrival_s, gpus, model): add it"),
    ("arrival_s,gpus,duration,model", "a plain CSV without its column duration_s (columns: arrival_s, gpus, duration, "
                                      "model)"),
    ("job_id,gpu_num,submit_time", "Helios' cluster_log.csv without its column duration (columns: job_id, gpu_num, "
                                   "submit_time)"),
    ("job_id,num_gpu,submit_time,model_name", "a Muri CSV without its columns iterations, iteration_time"),
])
def test_a_header_with_most_of_one_kinds_columns_is_told_what_it_lacks(tmp_path, header, said):
    """A plain CSV missing one column was "not a trace this reads", as if it were no trace (helper-98 F5): what
    --format plain said (the missing column) is said without it."""
    path = tmp_path / "t.csv"
    path.write_text(header + "\n0,2,resnet,1\n")
    with pytest.raises(TraceError) as refused:
        detect_format(path)
    assert f"t.csv: line 1: {said}" in str(refused.value)
    path.write_text("name,size\na,1\n")  # nothing of any kind: as before
    with pytest.raises(TraceError, match="line 1: not a trace this reads"):
        detect_format(path)
