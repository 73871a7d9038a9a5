"""bench/link_busy.py's arithmetic on a sampled egress counter (the bench itself needs a live cluster)."""

import pytest
from conftest import load_bench


def test_mean_rate_and_idle_windows():
    bench = load_bench("link_busy")
    gigabit = 1e9
    # four 5 ms windows: full rate, idle, half rate, a trickle under a tenth of the rate
    per_window = [gigabit / 8 * 0.005, 0, gigabit / 8 * 0.005 / 2, gigabit / 8 * 0.005 / 20]
    samples, sent = [(0.0, 0)], 0
    for index, sent_now in enumerate(per_window, start=1):
        sent += sent_now
        samples.append((index * 0.005, sent))
    figures = bench.link_figures(samples, gigabit)
    assert figures["gbit_s"] == pytest.approx((1 + 0 + 0.5 + 0.05) / 4)
    assert figures["idle"] == pytest.approx(2 / 4)
