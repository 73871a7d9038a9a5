"""bench/settle_replay.py's reading of `make bench` logs (the logs themselves come from real benches)."""

from conftest import load_bench


def _row(first: str, second: str, concurrent: float, crossover: float, engine: str = "horovod") -> str:
    """One pair's lines as bench/crossover_pair.py prints them (only those the replay reads)."""
    return (f"$ xover run --group {first} {second} --mode all --policy all --seconds 15.0 --bandwidth 1gbit "
            f"--engine {engine}\n"
            f"  sequential 1.00 | concurrent {concurrent:.2f} | crossover work-conserving {crossover:.2f} (x)\n"
            f"  adaptive 1.40: 0.990 of the best of crossover and concurrent (crossover); settled in crossover\n")


def test_each_row_is_set_against_the_mean_of_its_pairs_earlier_rows(tmp_path, capsys):
    log = tmp_path / "bench.log"
    log.write_text(_row("a", "b", 1.00, 1.20) + _row("c", "d", 1.30, 1.31) + _row("a", "b", 1.00, 1.10)
                   + _row("a", "b", 1.10, 1.00)  # earlier mean 1.15 / 1.00: 15% ahead, this row the other way
                   + _row("a", "b", 1.00, 1.20, engine="torch"))  # another engine: no earlier row
    assert load_bench("settle_replay").main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "5 adaptive rows in 1 logs; rows with earlier ones of their pair: 2" in out
    assert "           1 | 10% and more |    1 | 0" in out  # 1.20 / 1.00 before, 1.10 / 1.00 now: agrees
    assert "           2 | 10% and more |    1 | 1" in out
    assert "earlier lead 10% or more: 1 of 2 the other way round" in out
    assert "2, +15.0%, -9.1%" in out


def test_a_missing_log_is_named(tmp_path, capsys):
    assert load_bench("settle_replay").main([str(tmp_path / "none.log")]) == 2
    assert "no such log" in capsys.readouterr().err


def test_rows_where_adaptive_ran_one_way_throughout_are_that_way_measured_twice(tmp_path, capsys):
    def row(adaptive: float, concurrent: float, crossover: float, time: str) -> str:
        best = max(concurrent, crossover)
        return (f"$ xover run --group a b --mode all --policy all --seconds 15.0 --bandwidth 1gbit --engine torch\n"
                f"  sequential 1.00 | concurrent {concurrent:.2f} | crossover work-conserving {crossover:.2f} (x)\n"
                f"  adaptive {adaptive:.2f}: {adaptive / best:.3f} of the best of crossover and concurrent (x); "
                f"settled in crossover; time {time}\n")

    log = tmp_path / "bench.log"
    log.write_text(row(1.40, 1.20, 1.50, "crossover 100%") + row(1.50, 1.20, 1.50, "crossover 100%")
                   + row(1.30, 1.20, 1.50, "crossover 70%, concurrent 30%"))
    assert load_bench("settle_replay").main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "ran one way throughout: 2; adaptive over that way's own column 0.967" in out
    assert ">= 0.98 x the better of crossover and concurrent: 1 of 2" in out
