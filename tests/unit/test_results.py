"""Typed results (xover/results.py): built from the store's job summaries, compared by analysis, and
written back as the JSON and CSV shapes scripts have always read, key for key and in order."""

import dataclasses

import pytest

from xover.analysis import compare, job_summary, loss_parity
from xover.results import GroupModel, GroupReport, RunResult, SimulatedGain
from xover.store.models import RecipeSnapshot, Run
from xover.store.queries import run_fields


def _rows(run_id: int, start: float, compute: float, communication: float, steps: int = 12) -> list[dict]:
    iteration = compute + communication
    return [{"run_id": run_id, "step": step, "time_s": iteration * (step + 1),
             "wall_time": start + iteration * (step + 1), "iteration_s": iteration, "data_s": 0.0,
             "compute_s": compute, "communication_s": communication, "wait_s": 0.0, "samples": 64,
             "loss": 2.0 - 0.1 * step, "yields": 0, "link_s": None, "comm_cpu_s": None, "held": None}
            for step in range(steps)]


def _summary(run_id: int, name: str, mode: str, policy: str | None, group: int | None, rows: list[dict]) -> dict:
    run = Run(id=run_id, experiment_id="e1", name=name, recipe=RecipeSnapshot(path=f"{name}.toml"), mode=mode,
              policy=policy, group_index=group, np=2, hosts="localhost:2", status="finished", exit_code=0)
    return job_summary(run_fields(run), rows, [])


def _experiment() -> tuple[list[dict], dict[int, list[dict]]]:
    """a (30 + 10 ms) and b (10 + 30 ms): alone, concurrent (half speed each) and crossover (full speed
    each); and a run alone outside any group."""
    iterations = {1: _rows(1, 0.0, 0.030, 0.010), 2: _rows(2, 10.0, 0.010, 0.030),
                  3: _rows(3, 20.0, 0.060, 0.020), 4: _rows(4, 20.0, 0.020, 0.060),
                  5: _rows(5, 30.0, 0.030, 0.010), 6: _rows(6, 30.0, 0.010, 0.030), 7: _rows(7, 40.0, 0.01, 0.0)}
    specs = [(1, "a", "sequential", None, 0), (2, "b", "sequential", None, 0), (3, "a", "concurrent", None, 0),
             (4, "b", "concurrent", None, 0), (5, "a", "crossover", "work-conserving", 0),
             (6, "b", "crossover", "work-conserving", 0), (7, "c", "solo", None, None)]
    return [_summary(run_id, name, mode, policy, group, iterations[run_id])
            for run_id, name, mode, policy, group in specs], iterations


def test_a_summary_and_its_result_carry_the_same_fields_in_the_same_order():
    # A field added to store/queries.run_fields or analysis.job_summary must be added to RunResult too:
    # from_summary refuses a key it does not know rather than drop it from the JSON unseen.
    [summary, *_], _ = _experiment()
    assert list(RunResult.from_summary(summary).to_json())[:len(summary)] == list(summary)
    with pytest.raises(TypeError):
        RunResult.from_summary({**summary, "a_new_figure": 1.0})


def test_the_final_loss_is_the_last_one_known():
    # a script stepping two optimizers after one backward (Lightning's manual optimization): an iteration
    # each, the loss in the first; the second's None is not the job's final loss
    rows = _rows(1, 0.0, 0.03, 0.01, steps=4)
    rows[-1]["loss"] = None
    assert _summary(1, "a", "sequential", None, 0, rows)["final_loss"] == pytest.approx(1.8)
    assert _summary(1, "a", "sequential", None, 0, [{**r, "loss": None} for r in rows])["final_loss"] is None


def test_a_diverged_jobs_final_loss_is_not_finite_and_where_it_diverged_is_said_once_per_job():
    # a NaN from step 3 on is the job's final loss, not step 2's (SQLite once kept it as NULL: "not known")
    import math

    from xover.analysis import loss_not_finite_warnings

    rows = _rows(1, 0.0, 0.03, 0.01, steps=6)
    for row, loss in zip(rows[3:], (math.inf, math.nan, math.nan)):
        row["loss"] = loss
    summary = _summary(1, "a", "sequential", None, 0, rows)
    assert math.isnan(summary["final_loss"])
    assert summary["loss_not_finite"] == {"step": 3, "loss": "inf", "iterations": 3}
    assert _summary(1, "a", "sequential", None, 0, _rows(1, 0.0, 0.03, 0.01))["loss_not_finite"] is None
    shared = _summary(2, "a", "crossover", "work-conserving", 0, rows)
    jobs = [RunResult.from_summary(s) for s in (summary, shared)]
    assert loss_not_finite_warnings(jobs) == [
        "a: loss not finite from step 3 (inf, 3 of 6 iterations) in sequential, crossover (work-conserving)"
    ]


def test_a_job_whose_loss_is_finite_again_after_a_nan_is_not_said_to_have_diverged():
    """A script that skips a batch whose gradient is NaN (its step not taken) trains on: that NaN is summed into the
    iteration of its next step, and the warning read as "diverged from step 5" of a job that never did."""
    import math

    from xover.analysis import loss_not_finite_warnings

    rows = _rows(1, 0.0, 0.03, 0.01, steps=6)
    rows[2]["loss"] = math.nan
    summary = _summary(1, "a", "sequential", None, 0, rows)
    assert summary["loss_not_finite"] == {"step": 2, "loss": "nan", "iterations": 1}
    assert loss_not_finite_warnings([RunResult.from_summary(summary)]) == [
        "a: loss not finite at step 2 (nan, 1 of 6 iterations), finite after it (a batch the script skipped, its "
        "loss summed into the iteration of its next step?) in sequential"
    ]


def test_loss_parity_compares_losses_that_are_not_finite_too():
    """A NaN on both sides at a step is the same (both diverged there); a NaN or inf against a number or the other
    kind differs, by inf; every step with a loss on both sides is counted (they were left out)."""
    import math

    def run(run_id, mode, losses):
        rows = _rows(run_id, 10.0 * run_id, 0.03, 0.01, steps=len(losses))
        for row, loss in zip(rows, losses):
            row["loss"] = loss
        policy = "work-conserving" if mode == "crossover" else None
        return RunResult.from_summary(_summary(run_id, "a", mode, policy, 0, rows)), rows

    nan, inf = math.nan, math.inf
    alone, alone_rows = run(1, "sequential", [1.0, 0.5, inf, nan, nan, -inf])
    same, same_rows = run(2, "crossover", [1.0, 0.5, inf, nan, nan, -inf])
    parity = loss_parity([alone, same], {1: alone_rows, 2: same_rows})
    assert [(p.steps, p.max_abs_loss_diff, p.identical) for p in parity] == [(6, 0.0, True)]
    for other, expected in (
        ([1.0, 0.5, inf, nan, 0.25, -inf], (6, inf, False)),
        ([1.0, 0.5, -inf, nan, nan, -inf], (6, inf, False)),
        ([1.0, 0.5, inf, nan, nan, inf], (6, inf, False)),
        ([1.0, 0.75, inf, nan, nan, -inf], (6, 0.25, False)),
        ([1.0, 0.5, inf, nan, nan, None], (5, 0.0, True)),  # a loss not known is still left out
    ):
        shared, shared_rows = run(2, "concurrent", other)
        [result] = loss_parity([alone, shared], {1: alone_rows, 2: shared_rows})
        assert (result.steps, result.max_abs_loss_diff, result.identical) == expected


def test_compare_sets_speeds_and_gains_and_the_dict_view_keeps_the_json_shapes():
    summaries, iterations = _experiment()
    jobs, [group] = compare([RunResult.from_summary(s) for s in summaries], iterations)
    by = {(j.name, j.mode): j for j in jobs}
    assert by[("a", "crossover")].speed == pytest.approx(1.0) and by[("b", "concurrent")].slowdown == pytest.approx(2.0)
    assert by[("a", "sequential")].slowdown == 1.0 and by[("c", "solo")].samples_per_s_shared == pytest.approx(6400.0)
    assert group.jobs == ["a", "b"] and group.crossover_policy == "work-conserving"
    assert group.crossover_vs_sequential == pytest.approx(2.0) and group.concurrent_vs_sequential == pytest.approx(1.0)
    assert group.policies["work-conserving"].vs_concurrent == pytest.approx(2.0)

    # `xover run --json` and the report write each one's to_json: the keys in the order they always had
    shown = group.to_json()
    assert list(shown) == ["group", "jobs", "policies", "sequential", "concurrent_vs_sequential",
                           "crossover_vs_sequential", "crossover_policy", "crossover_vs_concurrent",
                           "concurrent_overlap", "crossover_overlap"]
    assert list(shown["policies"]["work-conserving"]) == ["aggregate", "window_s", "overlap", "vs_concurrent",
                                                           "starts_apart_s"]
    for summary, typed in zip(summaries, jobs):
        assert list(typed.to_json())[:len(summary)] == list(summary)  # the summary's keys first, in its order
    tails = {(j.name, j.mode): list(j.to_json())[len(summaries[0]):] for j in jobs}
    assert tails[("a", "crossover")] == ["samples_per_s_shared", "slowdown"]  # shared: together, then slowdown
    assert tails[("a", "sequential")] == ["slowdown", "samples_per_s_shared"]  # alone: the other way round
    assert tails[("c", "solo")] == ["slowdown", "samples_per_s_shared"]


@pytest.mark.parametrize("status", ["failed", "timeout", "interrupted"])
def test_a_run_that_did_not_finish_measures_no_way(status):
    """A job whose crossover run failed part-way (or timed out, or was stopped): its rows up to then made an
    aggregate over the window both jobs ran, shown beside the others and kept for the next plan. Now its way
    has none, and a job whose run alone did not finish has no speed to be compared with."""
    summaries, iterations = _experiment()
    broken = [{**s, "status": status} if (s["name"], s["mode"]) == ("b", "crossover") else s for s in summaries]
    jobs, [group] = compare([RunResult.from_summary(s) for s in broken], iterations)
    assert group.policies["work-conserving"].aggregate is None and group.crossover_vs_sequential is None
    assert group.concurrent_vs_sequential == pytest.approx(1.0)  # the ways whose runs finished, as before
    alone_unfinished = [{**s, "status": status} if (s["name"], s["mode"]) == ("a", "sequential") else s
                        for s in summaries]
    jobs, [group] = compare([RunResult.from_summary(s) for s in alone_unfinished], iterations)
    assert group.concurrent_vs_sequential is None and group.crossover_vs_sequential is None
    assert {(j.name, j.mode): j.speed for j in jobs}[("a", "crossover")] is None


def test_a_group_without_crossover_lists_its_policies_last():
    summaries, iterations = _experiment()
    _, [group] = compare([RunResult.from_summary(s) for s in summaries if s["mode"] != "crossover"], iterations)
    assert list(group.to_json())[-1] == "policies" and group.crossover_vs_sequential is None


def test_the_reports_group_derives_its_gains_and_the_parity_is_typed():
    summaries, iterations = _experiment()
    jobs, [comparison] = compare([RunResult.from_summary(s) for s in summaries], iterations)
    model = GroupModel(fluid_bound=2.0, predicted={"work-conserving": SimulatedGain(gain=1.9, speeds={"a": 1.0})})
    group = GroupReport.of(comparison, {"a": 1.5}, 1.6, model)
    assert group.measured_gain == pytest.approx(2.0) and group.of_fluid_bound == pytest.approx(1.0)
    assert group.gain_error_pct == pytest.approx(25.0)
    shown = group.to_json()
    # the keys scripts rely on keep their order; the plan's pick and the concurrent prediction follow them
    assert list(shown)[-20:-12] == ["alone_vs_profile", "predicted_gain", "fluid_bound", "model_gain", "simulated",
                                    "measured_gain", "of_fluid_bound", "gain_error_pct"]
    assert list(shown)[-12:-5] == ["simulated_without_turns", "concurrent_predicted", "concurrent_error_pct",
                                   "planned_sharing", "predicted_by_sharing", "best_measured", "pick_vs_best"]
    # then why the plan picked it, and an adaptive run's way, time in each way and timeline (none here), and
    # crossover's prediction (the plan's, else the model's)
    assert list(shown)[-5:] == ["planned_reason", "adaptive_way", "adaptive_time", "adaptive_timeline",
                                "crossover_predicted"]
    assert shown["crossover_predicted"] == pytest.approx(1.6)
    assert shown["adaptive_timeline"] == [] and shown["adaptive_time"] == {} and "adaptive_vs_best" not in shown
    # no plan: no pick; the measured best is the mode with the highest gain (crossover, 2.0, here)
    assert shown["planned_sharing"] is None and shown["best_measured"] == "crossover" and shown["pick_vs_best"] is None
    assert shown["simulated"] == {"work-conserving": {"gain": 1.9, "speeds": {"a": 1.0}}}
    parity = loss_parity(jobs, iterations)
    assert [(p.name, p.mode, p.identical) for p in parity] == [("a", "concurrent", True), ("b", "concurrent", True),
                                                              ("a", "crossover", True), ("b", "crossover", True)]


def test_a_job_that_finished_before_the_iterations_it_was_given_is_warned_of_once():
    """A script whose own count (its arguments) ends it before the length xover gave it: the group's overlap
    and the plan's figures assumed that length, so the report says so, once per job with the modes."""
    from xover.analysis import length_warnings, report_warnings

    def job(name, mode, status, iterations, planned):
        return RunResult(name=name, mode=mode, status=status, iterations=iterations, iterations_planned=planned)

    jobs = [job("ddp-digits", "sequential", "finished", 1000, 4184), job("ddp-digits", "crossover", "finished", 1000, 4184),
            job("mlp", "crossover", "finished", 200, 200),  # its whole length
            job("cut", "crossover", "timeout", 50, 200), job("failed", "concurrent", "failed", 3, 200),
            job("unplanned", "sequential", "finished", 30, None)]
    [warning] = length_warnings(jobs)
    assert warning.startswith("ddp-digits finished on its own after 1000 of the 4184 iterations it was given "
                              "(crossover, sequential)"), warning
    assert "a count above the job's length in its arguments" in warning
    # a script that stops on a condition of its own (a target loss) is not told only of its count
    assert "or a condition of its own, such as a target loss" in warning
    assert report_warnings(jobs, []) == [warning]


def test_a_job_faster_next_to_others_than_alone_is_warned_of_once_with_its_modes():
    """Two scripts of 12 and 60 steps read crossover 2.65 times one after another, one of them 1.53 times its
    speed alone: no job is faster sharing its devices than alone, so its run alone was slowed and every gain
    built on it reads high. The report and `xover run` say so (a probe session, 2026-12-06); noise within 10%
    is no warning."""
    from xover.analysis import faster_than_alone_warnings, report_warnings

    def job(name, mode, speed, policy=None):
        return RunResult(name=name, mode=mode, policy=policy, status="finished", speed=speed)

    jobs = [job("short", "sequential", 1.0), job("short", "crossover", 1.53, "work-conserving"),
            job("short", "concurrent", 1.2), job("long", "crossover", 1.08, "work-conserving"),
            job("long", "concurrent", 0.7), job("unmeasured", "crossover", None)]
    [warning] = faster_than_alone_warnings(jobs)
    assert warning.startswith("short ran 1.53x its speed alone next to other jobs (concurrent, crossover "
                              "(work-conserving)): sharing never makes a job faster"), warning
    assert report_warnings(jobs, []) == [warning]


def test_xover_run_warns_of_a_mode_whose_jobs_hardly_ran_together_as_the_report_does(capsys):
    """`xover run` printed 'concurrent/sequential 1.41' for jobs that ran together 0% of the time; only `xover
    report` said so."""
    from xover.analysis import overlap_warnings
    from xover.links import HOST
    from xover.results import GroupComparison, RunOutcome
    from xover.views import show_run

    group = GroupComparison(group=0, jobs=["short", "long"], policies={}, sequential=1.0,
                            measured={"concurrent": 1.41, "crossover": 1.2}, overlaps={"concurrent": 0.0,
                            "crossover": 0.9}, crossover_policy=None, windows={"concurrent": None, "crossover": 3.0},
                            starts_apart={})
    [warning] = overlap_warnings([group])
    # never together past warm-up: no figure for the mode, and the warning says so (it said "only 0%", and "whole
    # runs compared" where nothing was compared)
    assert warning.startswith("group 0: the concurrent jobs never ran at the same time past their warm-up (no "
                              "window), so nothing of this mode is a measurement of sharing: no figure for it"), warning
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["concurrent", "crossover"],
                        policies=["work-conserving"], jobs=[], groups=[group]), as_json=False)
    assert "never ran at the same time past their warm-up" in " ".join(capsys.readouterr().out.split())


def test_the_overlap_warning_says_how_far_apart_the_jobs_started_and_how_long_the_window_was():
    """The demo's warning that group 0's concurrent jobs ran together 49% of the run did not say why (a script
    job started 5 s after its partner) nor whether the window left was long enough to measure."""
    from xover.analysis import _starts_apart, overlap_warnings
    from xover.results import GroupComparison

    late, early = [{"wall_time": 5.2 + 0.1 * k, "iteration_s": 0.1} for k in range(1, 4)], [
        {"wall_time": 0.1 * k, "iteration_s": 0.1} for k in range(1, 4)]
    assert _starts_apart([early, late]) == pytest.approx(5.2)
    assert _starts_apart([early, []]) is None
    group = GroupComparison(group=0, jobs=["a", "b"], policies={}, sequential=1.0, measured={"concurrent": 1.3},
                            overlaps={"concurrent": 0.49}, crossover_policy=None, windows={"concurrent": 16.34},
                            starts_apart={"concurrent": 5.2})
    [warning] = overlap_warnings([group])
    assert "49% of that run (first iterations 5.2 s apart; a window of 16.3 s)" in warning, warning
    assert "mostly an early end" in warning, warning  # 17 s not together: 5.2 of them the start
    late = dataclasses.replace(group, starts_apart={"concurrent": 12.0})
    [warning] = overlap_warnings([late])
    assert "mostly a late start: a job that starts slowly" in warning, warning
    crossover = dataclasses.replace(group, overlaps={"crossover": 0.38}, windows={"crossover": 0.3},
                                    starts_apart={"crossover": 0.2}, crossover_policy="work-conserving")
    [warning] = overlap_warnings([crossover])
    assert warning.startswith("group 0: the crossover (work-conserving) jobs ran at the same time for only 38%")


def test_the_overlap_warning_blames_a_job_that_failed_not_the_lengths():
    """A partner that crashed at its start left its crossover pair no window, and the warning said "mostly an early
    end: the faster job was done long before the others; give the faster job more iterations"."""
    from xover.analysis import overlap_warnings
    from xover.results import GroupComparison

    group = GroupComparison(group=0, jobs=["crash", "slow"], policies={}, sequential=None, measured={"crossover": None},
                            overlaps={"crossover": 0.0}, crossover_policy="work-conserving",
                            windows={"crossover": None}, starts_apart={})
    jobs = [RunResult(name="crash", mode="crossover", policy="work-conserving", group=0, status="failed"),
            RunResult(name="slow", mode="crossover", policy="work-conserving", group=0, status="stopped"),
            RunResult(name="crash", mode="sequential", group=0, status="failed")]
    [warning] = overlap_warnings([group], jobs=jobs)
    assert warning == ("group 0: the crossover (work-conserving) jobs never ran at the same time past their warm-up (no "
                       "window), so nothing of this mode is a measurement of sharing (a job did not run to its end: "
                       "crash failed; see why below)"), warning
    finished = [dataclasses.replace(job, status="finished") for job in jobs]
    [lengths] = overlap_warnings([group], jobs=finished)
    assert "mostly an early end" in lengths and "did not run to its end" not in lengths


def test_jobs_that_never_ran_together_have_no_shared_aggregate():
    """A crossover pair that ran one after the other (b began when a had ended) read as 2.0x: each near its speed
    alone, summed; `of bound`, the best way measured and `report all`'s best gain followed from it."""
    summaries, iterations = _experiment()
    iterations[6] = _rows(6, 31.0, 0.010, 0.030)  # a's crossover run is 30.0-30.48 s: b's begins after it
    summaries[5] = _summary(6, "b", "crossover", "work-conserving", 0, iterations[6])
    jobs, [group] = compare([RunResult.from_summary(s) for s in summaries], iterations)
    assert group.crossover_vs_sequential is None and group.crossover_overlap == 0.0
    assert group.concurrent_vs_sequential == pytest.approx(1.0)  # the ones that ran together keep theirs


def test_jobs_that_ran_together_too_briefly_to_measure_have_no_shared_aggregate():
    """Where the jobs' time together held too few iterations to measure in, their whole runs were compared: a pair
    together for 16% of its run read crossover/sequential 2.02, the headline of `report all` (helper-93's probe,
    2026-12-07). Below half the run together, such a mode has no figure, and the warning says so."""
    from xover.analysis import overlap_warnings

    summaries, iterations = _experiment()
    iterations[6] = _rows(6, 30.35, 0.010, 0.030)  # a's crossover run is 30.0-30.48 s: 0.13 s of it together
    summaries[5] = _summary(6, "b", "crossover", "work-conserving", 0, iterations[6])
    jobs, [group] = compare([RunResult.from_summary(s) for s in summaries], iterations)
    assert group.windows["crossover"] is None and 0 < group.crossover_overlap < 0.5
    assert group.crossover_vs_sequential is None
    assert all(job.speed is None for job in jobs if job.mode == "crossover")
    assert group.concurrent_vs_sequential == pytest.approx(1.0)  # the ones that ran together keep theirs
    [warning] = overlap_warnings([group])
    assert "too short a window to measure in), so nothing of this mode is a measurement of sharing: no figure" in (
        warning), warning


def test_a_run_alone_that_did_not_finish_has_no_speed_figures():
    """A job that failed alone at its 4th of 20 iterations showed slowdown 1.00 and its samples/s as if shared."""
    summaries, iterations = _experiment()
    summaries[0] = {**summaries[0], "status": "failed"}
    jobs, _ = compare([RunResult.from_summary(s) for s in summaries], iterations)
    assert jobs[0].slowdown is None and jobs[0].samples_per_s_shared is None
    assert jobs[1].slowdown == 1.0  # b finished alone


@pytest.mark.parametrize("status", ["failed", "timeout", "stopped", "interrupted"])
def test_a_run_that_ended_without_finishing_has_no_throughput_in_any_view(status):
    """The table showed '-' for a failed run alone while the CSV and JSON kept its samples/s (and speed 1.0), and a
    timed-out run under crossover showed its samples/s together in the table: a run cut short is no measurement,
    so every view leaves its throughput out; its iteration times stay, as they were."""
    summaries, iterations = _experiment()
    summaries[0] = {**summaries[0], "status": status}  # a alone
    summaries[4] = {**summaries[4], "status": status}  # a under crossover
    jobs, _ = compare([RunResult.from_summary(s) for s in summaries], iterations)
    for job in (jobs[0], jobs[4]):
        assert (job.samples_per_s, job.samples_per_s_shared, job.speed, job.slowdown) == (None, None, None, None)
        assert job.iteration_ms == pytest.approx(40.0)
        shown = job.to_json()
        assert shown["samples_per_s"] is None and "samples_per_s_shared" in shown  # the keys stay
    assert jobs[1].samples_per_s and jobs[5].samples_per_s_shared  # b finished in both
    running = {**summaries[1], "status": "running"}  # a run still going keeps its figures so far
    assert compare([RunResult.from_summary(running)], {2: iterations[2]})[0][0].samples_per_s


def test_the_runs_not_started_are_said_per_group_and_reason():
    from xover.results import NotStarted, not_started_lines

    why = "needs_data: failed alone (rank 1: FileNotFoundError: missing.csv)"
    units = [NotStarted(0, "sequential", None, ["needs_data#2"], why),
             NotStarted(0, "concurrent", None, ["ok", "needs_data"], why),
             NotStarted(0, "crossover", "work-conserving", ["ok", "needs_data"], why),
             NotStarted(0, "crossover", "round-robin", ["ok", "needs_data"], why),
             NotStarted(0, "adaptive", "work-conserving", ["ok", "needs_data"], why),
             NotStarted(1, "concurrent", None, ["x", "y"], "y: refused (uneven inputs with Join)")]
    assert not_started_lines(units) == [
        "group 0: not started: sequential (needs_data#2), concurrent, crossover (work-conserving), crossover "
        f"(round-robin), adaptive - {why}; each would have failed the same way",
        "group 1: not started: concurrent - y: refused (uneven inputs with Join); each would have failed the same way",
    ]
    assert units[2].to_json() == {"group": 0, "mode": "crossover", "policy": "work-conserving",
                                  "jobs": ["ok", "needs_data"], "why": why, "stopped_first": False}
    assert not_started_lines([]) == []


def test_xover_run_says_the_runs_not_started_under_its_table_as_the_report_does(capsys):
    """`xover run`'s own table had fewer rows than the modes asked and said nothing of why (only its stderr counted
    the runs not started, while the run went); `xover report` says the line under its jobs. Now both say it, in
    the same words, and `xover run --json` carries them as the report's JSON does (`not_started`)."""
    from xover.links import HOST
    from xover.results import NotStarted, RunOutcome, not_started_lines
    from xover.views import show_run

    failed = dataclasses.replace(RunResult.from_summary(_summary(1, "b", "sequential", None, 0, [])), status="failed")
    units = [NotStarted(0, "concurrent", None, ["a", "b"], "b: failed alone (RuntimeError: boom)"),
             NotStarted(0, "crossover", "work-conserving", ["a", "b"], "b: failed alone (RuntimeError: boom)")]
    outcome = RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["sequential", "concurrent",
                         "crossover"], policies=["work-conserving"], jobs=[failed], groups=[], not_started=units)
    show_run(outcome, as_json=False)
    shown = capsys.readouterr().out
    [line] = not_started_lines(units)
    assert line.startswith("group 0: not started: concurrent, crossover (work-conserving) - b: failed alone")
    assert line in " ".join(shown.split())
    assert shown.index("not started") > shown.index("sequential")  # under the jobs' table
    assert outcome.to_json()["not_started"] == [unit.to_json() for unit in units]
    assert dataclasses.replace(outcome, not_started=[]).to_json()["not_started"] == []


def test_the_overlap_warning_of_a_run_given_seconds_does_not_advise_seconds(capsys):
    """`xover run ... --seconds 20` whose jobs ran together briefly was told '... or use --seconds'."""
    from xover.analysis import overlap_warnings
    from xover.links import HOST
    from xover.results import GroupComparison, RunOutcome
    from xover.views import show_run

    early = GroupComparison(group=0, jobs=["a", "b"], policies={}, sequential=1.0, measured={"concurrent": 1.3},
                            overlaps={"concurrent": 0.49}, crossover_policy=None, windows={"concurrent": 16.34},
                            starts_apart={"concurrent": 5.2})
    late = dataclasses.replace(early, starts_apart={"concurrent": 12.0})
    assert all(warning.endswith("or use --seconds)") for warning in overlap_warnings([early, late]))
    [early_end, late_start] = overlap_warnings([early, late], lengths_in_seconds=True)
    assert "mostly an early end" in early_end and "--seconds gave each job the iterations it does in that time " \
        "alone, and sharing slowed them unequally; run without --seconds" in early_end, early_end
    assert "mostly a late start" in late_start and "a longer --seconds leaves the start a smaller share" in late_start
    assert "use --seconds" not in early_end + late_start
    for seconds, said in ((None, "or use --seconds"), (20.0, "a longer --seconds")):
        show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["concurrent"],
                            policies=["work-conserving"], jobs=[], groups=[late], seconds=seconds), as_json=False)
        assert said in " ".join(capsys.readouterr().out.split()), seconds


def test_jobs_that_never_ran_together_get_no_speed_shared():
    """Two concurrent runs apart in time (one ended before the other's warm-up did): no aggregate for the mode, and
    no speed nor slowdown for either job, whose figures were each near alone (their sum read as a gain: concurrent
    slowdowns 0.94 and 1.86 printed beside a group's '-', 2026-12-04)."""
    summaries, iterations = _experiment()
    iterations[4] = _rows(4, 500.0, 0.020, 0.060)
    summaries = [_summary(4, "b", "concurrent", None, 0, iterations[4]) if s["mode"] == "concurrent" and s["name"] == "b"
                 else s for s in summaries]
    jobs, [group] = compare([RunResult.from_summary(s) for s in summaries], iterations)
    by = {(j.name, j.mode): j for j in jobs}
    assert group.concurrent_vs_sequential is None and group.overlaps["concurrent"] == 0.0
    for name in ("a", "b"):
        assert by[(name, "concurrent")].speed is None and by[(name, "concurrent")].slowdown is None
        assert by[(name, "concurrent")].samples_per_s_shared is None
    assert by[("a", "crossover")].speed == pytest.approx(1.0)  # the other ways as before


def test_the_best_crossover_gain_of_an_experiment_is_over_every_turn_policy():
    """`xover report all` showed the default policy's gain as the best (1.11 where round-robin measured 1.40)."""
    from xover.report.data import ExperimentBrief
    from xover.results import ExperimentInfo

    summaries, iterations = _experiment()
    # round-robin: a at full speed, b at half (1.5), against work-conserving's 2.0; then the other way round
    iterations[8], iterations[9] = _rows(8, 50.0, 0.030, 0.010), _rows(9, 50.0, 0.020, 0.060)
    summaries += [_summary(8, "a", "crossover", "round-robin", 0, iterations[8]),
                  _summary(9, "b", "crossover", "round-robin", 0, iterations[9])]
    info = ExperimentInfo(id="e1", kind="run", status="finished", command=None, bandwidth=None, hosts=None,
                          plan_id=None, hardware=None, created_at=None, ended_at=None)

    def best(results: list[dict]) -> float:
        jobs, groups = compare([RunResult.from_summary(s) for s in results], iterations)
        reports = [GroupReport.of(group, {}, None, None) for group in groups]
        return ExperimentBrief(info, jobs, reports).summary().best_crossover_gain

    assert best(summaries) == pytest.approx(2.0)
    iterations[5], iterations[6] = _rows(5, 30.0, 0.060, 0.020), _rows(6, 30.0, 0.020, 0.060)  # WC at half speed
    summaries = [_summary(run, s["name"], s["mode"], s["policy"], 0, iterations[run]) if run in (5, 6) else s
                 for run, s in zip(range(1, len(summaries) + 1), summaries)]
    assert best(summaries) == pytest.approx(1.5)  # round-robin's, not work-conserving's 1.0


def test_the_overlap_warning_looks_at_crossover_under_every_policy():
    """Only the chosen policy's crossover was looked at: round-robin's run at 0.499 overlap went unwarned
    (`925a...` of 2026-12-04's Horovod store), its 1.44 shown in the policy table as any other."""
    from xover.analysis import overlap_warnings
    from xover.results import GroupComparison, PolicyResult

    policies = {"work-conserving": PolicyResult(aggregate=1.3, window_s=9.0, overlap=0.9),
                "round-robin": PolicyResult(aggregate=1.44, window_s=4.0, overlap=0.3, starts_apart_s=0.1)}
    group = GroupComparison(group=0, jobs=["a", "b"], policies=policies, sequential=1.0,
                            measured={"concurrent": 1.2, "crossover": 1.3}, overlaps={"concurrent": 0.8, "crossover": 0.9},
                            crossover_policy="work-conserving", windows={"concurrent": 8.0, "crossover": 9.0},
                            starts_apart={})
    [warning] = overlap_warnings([group])
    assert warning.startswith("group 0: the crossover (round-robin) jobs ran at the same time for only 30% of that run "
                              "(first iterations 0.1 s apart; a window of 4.0 s)"), warning


def test_xover_run_leaves_out_the_aggregate_of_a_group_none_of_whose_runs_gave_a_figure(capsys):
    """Two copies of a script refused in every run (hvd.DistributedOptimizer(op=hvd.Adasum)) printed a table of
    one row of dashes under the failures; a group with a figure is still shown."""
    from xover.links import HOST
    from xover.results import GroupComparison, RunOutcome
    from xover.views import show_run

    failed = GroupComparison(group=0, jobs=["a", "a#2"], policies={}, sequential=None, measured={},
                             overlaps={}, crossover_policy="work-conserving", windows={}, starts_apart={})
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["crossover"],
                        policies=["work-conserving"], jobs=[], groups=[failed]), as_json=False)
    assert "aggregate throughput" not in capsys.readouterr().out
    ran = dataclasses.replace(failed, group=1, sequential=1.0, measured={"crossover": 1.3},
                              overlaps={"crossover": 1.0}, windows={"crossover": 10.0})
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["crossover"],
                        policies=["work-conserving"], jobs=[], groups=[failed, ran]), as_json=False)
    shown = capsys.readouterr().out
    assert "aggregate throughput" in shown and "1.30" in shown and "a + a#2" in shown, shown


def test_xover_run_names_a_single_jobs_group_alone_and_says_why_a_group_has_no_gain(capsys):
    """A plan's job alone in its group ran "sequential" in `xover run`'s table, though its plan said alone and nothing
    ran one after another; a plan's run in one way showed its group's row of dashes without the line `xover report`
    prints under it (no job ran alone, so no gain is measured)."""
    from xover.links import HOST
    from xover.results import GroupComparison, RunOutcome, RunResult
    from xover.views import show_run

    jobs = [RunResult(name=name, mode=mode, group=group, status="finished", iterations=10)
            for name, mode, group in (("solo", "sequential", 0), ("a", "adaptive", 1), ("b", "adaptive", 1))]
    group = GroupComparison(group=1, jobs=["a", "b"], policies={}, sequential=None, measured={"adaptive": None},
                            overlaps={"adaptive": 0.9}, crossover_policy=None, windows={}, starts_apart={})
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["planned"],
                        policies=["work-conserving"], jobs=jobs, groups=[group]), as_json=False)
    shown = capsys.readouterr().out
    [solo] = [line for line in shown.splitlines() if "│ solo " in line]
    assert "│ alone " in solo and "sequential" not in solo, solo
    assert "group 1: no job ran alone in this experiment, so no gain is measured" in " ".join(shown.split()), shown
    assert "crossover policy" in " ".join(shown.split())
