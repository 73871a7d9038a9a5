"""bench/crossover_pair.py's hit rates of the model's predictions (the bench itself runs real pairs)."""

import json
import math

import pytest
from conftest import load_bench


def _row(measured: float, from_profiles: float, from_alone: float | None, drift: float) -> dict:
    return {"policies": {"work-conserving": {"aggregate": measured, "predicted": from_profiles}},
            "alone_vs_profile": {"a": drift}, "predicted_from_alone": from_alone}


def test_hit_rates_from_profiles_from_steady_rows_and_from_runs_alone(capsys):
    bench = load_bench("crossover_pair")
    rows = [
        _row(1.60, 1.62, 1.61, drift=1.02),  # both within 5%
        _row(1.50, 1.30, 1.45, drift=1.20),  # the machine moved: the profiles miss, the run alone does not
        _row(1.20, 1.40, 1.40, drift=0.98),  # the model itself misses
        _row(1.10, 1.12, None, drift=1.00),  # no runs alone to predict from
    ]
    bench.print_prediction_errors(rows)
    line = capsys.readouterr().out.strip()
    assert "within 5% of measured: 2 of 4 rows" in line
    assert "within 10% of their profiles: 2 of 3" in line
    assert "own runs alone: 2 of 3" in line
    # mean |error| over the rows that have each prediction
    from_alone = (abs(1.61 / 1.60 - 1) + abs(1.45 / 1.50 - 1) + abs(1.40 / 1.20 - 1)) / 3 * 100
    from_profiles = (abs(1.62 / 1.60 - 1) + abs(1.30 / 1.50 - 1) + abs(1.40 / 1.20 - 1) + abs(1.12 / 1.10 - 1)) / 4 * 100
    assert f"mean error {from_alone:.1f}%, from the profiles {from_profiles:.1f}%" in line


def test_the_gpu_checks_loss_parity_is_per_mode_and_only_where_steps_were_compared():
    summarize = load_bench("gpu/summarize")
    parity = [{"group": 0, "name": "a", "mode": "concurrent", "policy": None, "steps": 12, "max_abs_loss_diff": 0.0},
              {"group": 0, "name": "a", "mode": "crossover", "policy": "work-conserving", "steps": 0,
               "max_abs_loss_diff": None}]  # cut by a timeout before its first step
    report = {"experiment": {"bandwidth": "25gbit"}, "parity": parity,
              "jobs": [{"group": 0, "name": "a", "mode": m} for m in ("sequential", "concurrent", "crossover")],
              "groups": [{"group": 0, "jobs": ["a", "b"], "fluid_bound": 1.5, "concurrent_vs_sequential": 1.3,
                          "policies": {"work-conserving": {"aggregate": None}}}]}
    rows = {row[5]: row[-1] for row in summarize.group_rows("paper", report, [])}
    assert rows == {"sequential": "-", "concurrent": "exact", "crossover work-conserving": "-"}


def test_the_gpu_checks_mps_round_compares_with_concurrent_per_iteration_where_nothing_ran_alone():
    """The MPS round runs concurrent, crossover and adaptive, nothing alone: no aggregate can be formed, so the
    summary compares steps per second (H200, 2026-12-04: crossover 185 ms, concurrent 246 ms a step)."""
    summarize = load_bench("gpu/summarize")
    jobs = [{"group": 0, "name": name, "mode": mode, "policy": policy, "iteration_ms": ms}
            for name in ("a", "b")
            for mode, policy, ms in (("concurrent", None, 240.0), ("crossover", "work-conserving", 180.0),
                                     ("adaptive", "work-conserving", 200.0))]
    report = {"experiment": {"bandwidth": "9gbit"}, "jobs": jobs,
              "groups": [{"group": 0, "jobs": ["a", "b"], "concurrent_vs_sequential": None,
                          "policies": {"work-conserving": {"aggregate": None}}}]}
    rows = {row[5].split(" (")[0]: row[7] for row in summarize.group_rows("bound-mps1", report, [])}
    assert rows == {"concurrent": "1.00", "crossover work-conserving": "1.33*", "adaptive": "1.20*"}
    jobs[-1]["iteration_ms"] = None  # a job with no iteration: no figure, not a guess
    rows = {row[5].split(" (")[0]: row[7] for row in summarize.group_rows("bound-mps1", report, [])}
    assert rows["adaptive"] == "-"


def test_issue_60s_targets_over_the_rows(capsys):
    bench = load_bench("crossover_pair")

    def row(pair, concurrent, crossover, adaptive, rule="clear"):
        return {"pair": pair, "engine": "horovod", "concurrent": concurrent, "adaptive": adaptive, "pick": "adaptive",
                "pick_reason": "close", "policies": {"work-conserving": {"aggregate": crossover}},
                "decisions": [{"rule": rule}]}

    rows = [
        row("a:b", 1.50, 1.40, 1.49),  # concurrent ahead; adaptive 0.993 of it
        row("c:d", 1.20, 1.50, 1.44, "measured"),  # crossover leads by 25%: adaptive keeps 0.96 of it and of the best
        row("e:f", 1.30, 1.31, 1.27),  # equal ways: 0.969 of the best, 0.977 of concurrent
        row("g:h", 1.30, 1.40, 1.40, "not probed"),  # no window fitted before a job's end: settled at once
    ]
    bench.print_targets(rows)
    out = capsys.readouterr().out
    assert "better of crossover and concurrent: 2 of 4" in out
    assert ">= 0.99 x concurrent: 3 of 4" in out
    assert "crossover where crossover led by 10% or more: 1 of 1" in out
    assert "settled on earlier measurements without probing: 1 of 4" in out
    began = [bench.adaptive_began(row["decisions"]) for row in rows]
    assert began == ["probed", "measured", "probed", "no time"]
    assert all(f" {how:>8} " in line for how, line in zip(began, (line for line in out.splitlines()
                                                                  if line.startswith(("a:b", "c:d", "e:f", "g:h")))))


def test_the_demos_makespans_are_both_measured_and_each_pick_is_beside_the_best(capsys, tmp_path):
    summary = load_bench("demo_summary")

    def job(mode, start, end, status="finished"):
        return {"mode": mode, "status": status, "started_at": f"2026-11-28 10:00:{start:02d}",
                "ended_at": f"2026-11-28 10:00:{end:02d}"}

    planned = {"experiment": {"id": "p1"}, "jobs": [job("adaptive", 0, 20), job("adaptive", 1, 22),
                                                    job("sequential", 22, 30)], "groups": []}
    comparison = {"experiment": {"id": "c1"}, "jobs": [job("sequential", 0, 14), job("sequential", 14, 30),
                                                       job("sequential", 30, 38), job("concurrent", 38, 58)],
                  "groups": [{"group": 0, "jobs": ["a", "b"], "planned_sharing": "adaptive", "planned_reason": "close",
                              "crossover_vs_sequential": 1.4, "concurrent_vs_sequential": 1.5,
                              "adaptive_vs_sequential": 1.47}]}
    assert summary.planned_makespan_s(planned) == 30.0
    assert summary.one_after_another_s(comparison) == 38.0  # 14 + 16 + 8: the runs alone, not the predictions
    [row] = summary.pick_rows(comparison)
    assert (row["pick"], row["best"], round(row["pick_vs_best"], 3)) == ("adaptive", "concurrent", 0.98)
    (tmp_path / "p.json").write_text(json.dumps(planned))
    (tmp_path / "c.json").write_text(json.dumps(comparison))
    assert summary.main([str(tmp_path / "p.json"), str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "30.0 s measured" in out and "38.0 s measured" in out and "the plan beat one after another" in out
    # the jobs one after another as a schedule (`xover run PLAN --mode sequential`): its makespan, time between
    # its runs included as the planned run's is; the comparison's sum is said beside it
    sequential = {"experiment": {"id": "s1"}, "jobs": [job("sequential", 0, 13), job("sequential", 15, 29),
                                                       job("sequential", 31, 39)]}
    (tmp_path / "s.json").write_text(json.dumps(sequential))
    assert summary.main([str(tmp_path / "p.json"), str(tmp_path / "c.json"),
                         "--one-after-another", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "39.0 s measured as a schedule (experiment s1)" in out and "summed" in out and "38.0 s" in out
    assert "1.30x: the plan beat one after another" in out


def test_issue_60s_targets_on_the_means_over_the_repeats_and_against_the_benchs_own_noise(capsys):
    bench = load_bench("crossover_pair")

    def row(pair, concurrent, crossover, adaptive):
        return {"pair": pair, "engine": "torch", "concurrent": concurrent, "adaptive": adaptive, "pick": "adaptive",
                "pick_reason": "close", "policies": {"work-conserving": {"aggregate": crossover}}, "decisions": []}

    rows = [
        row("a:b", 1.00, 1.10, 1.04), row("c:d", 1.30, 1.20, 1.30),  # run 1: a:b 0.945 of crossover
        row("a:b", 1.02, 1.04, 1.08), row("c:d", 1.26, 1.24, 1.22),  # run 2: c:d 0.968 of concurrent
    ]
    # the ways' log ratios run to run: ln(1.10/1.04), ln(1.00/1.02), ln(1.20/1.24), ln(1.30/1.26)
    ratios = [math.log(1.10 / 1.04), math.log(1.00 / 1.02), math.log(1.20 / 1.24), math.log(1.30 / 1.26)]
    noise = math.sqrt(sum(r * r for r in ratios) / len(ratios) / 2)
    assert bench.run_to_run_noise(rows) == pytest.approx(noise)
    bench.print_targets(rows)
    out = capsys.readouterr().out
    assert "better of crossover and concurrent: 2 of 4" in out
    # the means: a:b adaptive 1.06 against crossover 1.07 (0.991); c:d 1.26 against concurrent 1.28 (0.984)
    assert "on each way's mean over a pair's runs: adaptive >= 0.98 x the better of crossover and concurrent: " \
           "2 of 2 pairs; >= 0.99 x concurrent: 1 of 2" in out
    ratio = noise * math.sqrt(2)
    assert f"moves {noise:.1%} from one run of a row to the next" in out and f"a ratio of two ways {ratio:.1%}" in out
    assert f"below {1 - 2 * ratio:.3f} x the better or x concurrent (twice that) on 0 of 4 rows" in out
    assert bench.run_to_run_noise(rows[:2]) is None  # one run of each pair: nothing to tell it from
    assert "by the order the ways ran in" not in out  # every row ran in one order


def test_the_rows_run_in_reverse_order_are_told_apart(capsys):
    bench = load_bench("crossover_pair")
    assert bench.MODES_REVERSED.split(",") == ["sequential", *reversed(bench.MODES_FORWARD.split(",")[1:])]

    def row(order, concurrent, crossover, adaptive, compute=None):
        return {"pair": "a:b", "engine": "horovod", "concurrent": concurrent, "adaptive": adaptive, "order": order,
                "policies": {"work-conserving": {"aggregate": crossover}}, "state_compute": compute or {}}

    bench.print_by_order([row("forward", 1.0, 1.2, 1.08, {"crossover": 1.10, "concurrent": 0.95}),
                          row("forward", 1.0, 1.0, 1.0, {"crossover": 1.20}),
                          row("reversed", 1.2, 1.0, 1.26)])
    out = capsys.readouterr().out
    assert ("by the order the ways ran in, mean of the rows: forward (2 rows) adaptive / best 0.950, adaptive / "
            "concurrent 1.040; reversed (1 rows) adaptive / best 1.050, adaptive / concurrent 1.050") in out
    # the compute of adaptive's states over their columns' runs, where the rows have it (none of the reversed)
    assert ("  forward: adaptive's compute per iteration over its column's run's, mean of the rows: crossover 1.150 "
            "(2 rows), concurrent 0.950 (1 rows)") in out
    assert "reversed: adaptive's compute" not in out


def test_the_windows_against_the_columns_and_what_ran_before_weighing_in(capsys):
    bench = load_bench("crossover_pair")

    def row(concurrent, crossover, windows, decisions=()):
        return {"concurrent": concurrent, "policies": {"work-conserving": {"aggregate": crossover}},
                "windows": windows, "decisions": list(decisions)}

    turned = {"rule": "time", "aggregate": {"turns": 1.00, "free": 1.01}, "difference": -0.01,
              "combined": {"difference": 0.03, "error": 0.04}}  # free alone, turns with what ran before
    kept = {"rule": "time", "aggregate": {"turns": 1.10, "free": 1.00}, "difference": 0.10,
            "combined": {"difference": 0.09, "error": 0.03}}
    bench.print_windows_against_columns([
        row(1.00, 1.10, [("crossover", 1.00), ("concurrent", 1.01), ("concurrent", 0.99), ("crossover", 1.00)],
            [turned]),  # windows 1.00 against columns 1.10
        row(1.00, 1.00, [("crossover", 1.10), ("concurrent", 1.00)], [kept]),  # 1.10 against 1.00
        row(1.00, 1.00, [("crossover", 1.10)]),  # one way only: not compared
    ])
    out = capsys.readouterr().out
    assert f"is {(1 / 1.10 + 1.10) / 2:.3f} of the columns'" in out and "2 rows that probed both ways" in out
    assert "weighed in on 2 decisions; it turned 1 of them, 1 toward the way the row's columns put ahead" in out


def test_rows_where_adaptive_ran_one_way_throughout_measure_that_way_twice(capsys):
    bench = load_bench("crossover_pair")

    def row(adaptive, crossover, concurrent, time):
        return {"adaptive": adaptive, "concurrent": concurrent, "adaptive_time": time,
                "policies": {"work-conserving": {"aggregate": crossover}}}

    rows = [
        row(1.45, 1.50, 1.30, {"crossover": 1.0}),  # crossover throughout: 0.967 of its column, below 0.98 of it
        row(1.55, 1.50, 1.30, {"crossover": 1.0}),  # 1.033
        row(1.20, 1.50, 1.20, {"concurrent": 1.0}),  # concurrent throughout: 1.000 of its column, 0.8 of the best
        row(1.40, 1.50, 1.30, {"crossover": 0.7, "concurrent": 0.3}),  # it probed: not one way throughout
    ]
    found = bench.one_way_throughout(rows)
    assert [(way, round(ratio, 3)) for _, way, ratio in found] == [("crossover", 0.967), ("crossover", 1.033),
                                                                    ("concurrent", 1.0)]
    bench.print_one_way_throughout(rows)
    out = capsys.readouterr().out
    assert "(3 rows): 1.000 of that way's own column" in out and "concurrent on 1 of 3" in out


def test_a_way_that_ran_keeps_its_row_when_its_jobs_never_ran_together():
    """The GPU check's summary on a loaded machine: concurrent's jobs never overlapped past their warm-up, so the
    report has no aggregate for it; its row is still there, '-' where nothing was measured, its overlap 0%."""
    summarize = load_bench("gpu/summarize")
    jobs = [{"group": 0, "name": n, "mode": m, "policy": "work-conserving" if m in ("crossover", "adaptive") else None}
            for n in ("a", "b") for m in ("sequential", "concurrent", "crossover", "adaptive")]
    report = {"experiment": {"bandwidth": "1gbit"}, "jobs": jobs, "parity": [],
              "groups": [{"group": 0, "jobs": ["a", "b"], "concurrent_vs_sequential": None, "concurrent_overlap": 0.0,
                          "policies": {"work-conserving": {"aggregate": 1.4, "overlap": 0.8}},
                          "adaptive_vs_sequential": None, "adaptive_overlap": 0.0}]}
    rows = summarize.group_rows("pair-gloo", report, [])
    assert [row[5] for row in rows] == ["sequential", "concurrent", "crossover work-conserving",
                                        "adaptive (-; no timeline)"]
    concurrent, adaptive = rows[1], rows[3]
    assert (concurrent[6], concurrent[10]) == ("-", "0%")
    assert (adaptive[6], adaptive[7], adaptive[10]) == ("-", "-", "0%")
    assert rows[2][6:8] == ["1.40", "-"]  # crossover measured; nothing concurrent to set it against
