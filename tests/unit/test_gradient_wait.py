"""How a rank waits for its all-reduces (runtime/gradient_wait.py): asleep through most of the
transfer it expects, then polling. Pure timing logic, with the clock and the sleep scripted."""

import pytest

from xover.errors import XoverError
from xover.runtime import gradient_wait
from xover.settings import settings


@pytest.fixture
def scripted_time(monkeypatch):
    """perf_counter reads `now`; sleep records how long and moves `now` on; XOVER_WAIT unset."""
    state = {"now": 100.0, "sleeps": []}

    def sleep(seconds):
        state["sleeps"].append(seconds)
        state["now"] += seconds

    monkeypatch.setattr(gradient_wait.time, "perf_counter", lambda: state["now"])
    monkeypatch.setattr(gradient_wait.time, "sleep", sleep)
    return state


def _step(clock, state, transfer_s):
    clock.on_gradient()
    state["now"] += transfer_s
    clock.done()


def test_no_history_no_sleep(scripted_time):
    clock = gradient_wait.LinkClock()
    clock.on_gradient()
    clock.sleep_through_expected()
    assert scripted_time["sleeps"] == []


def test_sleeps_three_quarters_of_the_rest_of_the_shortest_recent_transfer(scripted_time):
    clock = gradient_wait.LinkClock()
    for transfer in (0.130, 0.120, 0.125):
        _step(clock, scripted_time, transfer)
    clock.on_gradient()
    scripted_time["now"] += 0.020  # backward went on after the first gradient
    clock.sleep_through_expected()
    assert scripted_time["sleeps"] == [pytest.approx(0.75 * (0.120 - 0.020))]


def test_only_the_last_five_transfers_count(scripted_time):
    clock = gradient_wait.LinkClock()
    for transfer in (0.010, 0.200, 0.200, 0.200, 0.200, 0.200):  # the short one has left the window
        _step(clock, scripted_time, transfer)
    clock.on_gradient()
    clock.sleep_through_expected()
    assert scripted_time["sleeps"] == [pytest.approx(0.75 * 0.200)]


def test_a_transfer_nearly_over_is_polled_for(scripted_time):
    clock = gradient_wait.LinkClock()
    _step(clock, scripted_time, 0.050)
    clock.on_gradient()
    scripted_time["now"] += 0.0495  # half a millisecond left: under MIN_REST_S
    clock.sleep_through_expected()
    scripted_time["now"] += 0.100  # and one past its expected end
    clock.sleep_through_expected()
    assert scripted_time["sleeps"] == []


def test_poll_turns_the_expectation_off(scripted_time, monkeypatch):
    monkeypatch.setenv("XOVER_WAIT", "poll")
    clock = gradient_wait.LinkClock()
    _step(clock, scripted_time, 0.120)
    clock.on_gradient()
    clock.sleep_through_expected()
    assert scripted_time["sleeps"] == []


def test_a_misspelt_wait_is_refused(monkeypatch):
    monkeypatch.setenv("XOVER_WAIT", "spin")
    with pytest.raises(XoverError, match="XOVER_WAIT='spin': expected one of expect, poll"):
        settings()


def test_polling_sleeps_grow_to_the_cap(scripted_time):
    answers = iter([False] * 8 + [True])
    gradient_wait.wait_without_spinning(lambda: next(answers))
    sleeps = scripted_time["sleeps"]
    assert sleeps[0] == pytest.approx(0.0002) and max(sleeps) == pytest.approx(0.002)
    assert all(b >= a for a, b in zip(sleeps, sleeps[1:])) and len(sleeps) == 8


def test_a_transfer_that_shortens_is_overslept_less_each_step(scripted_time):
    """The partner's traffic gone, the transfer takes 10 ms instead of 130: each step sleeps past its
    end, records that longer span, and the next sleep is shorter, until the poll takes over."""
    clock = gradient_wait.LinkClock()
    for _ in range(5):
        _step(clock, scripted_time, 0.130)
    late = []
    for _ in range(20):
        clock.on_gradient()
        start = scripted_time["now"]
        clock.sleep_through_expected()  # the transfer itself is over 10 ms after `start`
        scripted_time["now"] = max(scripted_time["now"], start + 0.010)
        late.append(round(scripted_time["now"] - start - 0.010, 9))
        clock.done()
    assert late[0] == pytest.approx(0.75 * 0.130 - 0.010)
    assert all(b < a for a, b in zip(late, late[1:]) if a > 0) and late[-1] == 0
    assert sum(late) < 4 * late[0]
