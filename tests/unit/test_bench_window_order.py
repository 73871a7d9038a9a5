"""bench/window_order.py's reading of `make bench` logs (the logs themselves come from real benches)."""

from conftest import load_bench


def _row(*segments: tuple[str, str, float, str]) -> str:
    """One adaptive row's lines as bench/crossover_pair.py prints them (only those the check reads)."""
    lines = ["  adaptive 1.40: 0.990 of the best of crossover and concurrent (crossover); settled in crossover"]
    lines += [f"    {kind:<8} {way:<12} {aggregate:.3f}  {reason}" for kind, way, aggregate, reason in segments]
    return "\n".join(lines) + "\n  final losses equal in every mode and policy: a yes, b yes\n"


def test_each_first_round_is_set_against_its_settled_stretch_and_by_the_state_it_began_in(tmp_path, capsys):
    log = tmp_path / "bench.log"
    log.write_text(
        _row(("probe", "crossover", 1.50, "start: round 1, window 1"), ("probe", "concurrent", 1.40, "round 1, window 2"),
             ("settled", "crossover", 1.65, "round 1: no time for more probes: the better estimate"))
        + _row(("probe", "concurrent", 1.20, "start: round 1, window 1"),
               ("probe", "crossover", 1.32, "round 1, window 2"),
               ("settled", "crossover", 1.20, "round 1: the difference counts"))
        # two pairs: settled / window counts it, the rounds of one pair do not
        + _row(("probe", "crossover", 1.00, "start: round 1, window 1"), ("probe", "concurrent", 1.10, "round 1, window 2"),
               ("probe", "concurrent", 1.10, "round 1, window 3"), ("probe", "crossover", 1.00, "round 1, window 4"),
               ("settled", "concurrent", 1.21, "round 1: the difference counts"))
        # no first round of two windows (settled on what was measured before): not read
        + _row(("settled", "crossover", 1.50, "measured on these jobs before, further apart than their error")))
    assert load_bench("window_order").main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "3 adaptive rows whose first round measured two windows, in 1 logs" in out
    assert "settled in the first window's way, settled / first window: 1 rows, geometric mean 1.100" in out
    assert "settled in the second window's way, settled / second window: 2 rows, geometric mean 1.000" in out
    assert "rounds of one pair begun in concurrent, second window / first: 1 rows, geometric mean 1.100" in out
    assert "rounds of one pair begun in crossover, second window / first: 1 rows, geometric mean 0.933" in out
    # sqrt(1.1 x 1.4 / 1.5): the place's lean apart from which way is ahead
    assert f"whichever way is ahead: {(1.1 * 1.4 / 1.5) ** 0.5:.3f}" in out


def test_a_missing_log_is_named(tmp_path, capsys):
    assert load_bench("window_order").main([str(tmp_path / "none.log")]) == 2
    assert "no such log" in capsys.readouterr().err
