"""bench/crossover_pair.py's hit rates of the model's predictions (the bench itself runs real pairs)."""

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
