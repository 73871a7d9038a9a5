"""The report's timeline arithmetic: an iteration's parts, the window that skips start-up skew, overlap, and
the yields of a model from a run alone."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from xover.report.timeline import intervals_in_window, iteration_intervals, middle_window, overlap_fraction

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JOB_KEYS = {"name", "recipe", "mode", "status", "exit_code", "iterations", "samples_per_s", "final_loss",
            "slowdown", "accuracy"}
ITERATION_COLUMNS = ["experiment", "run_id", "name", "mode", "policy", "step", "wall_time", "iteration_s", "data_s",
                     "compute_s", "communication_s", "wait_s", "samples", "loss", "yields", "link_s", "comm_cpu_s"]
runner = CliRunner()


def test_iteration_splits_into_communication_then_turn_wait_then_compute():
    intervals = iteration_intervals(_row(end=10.0, iteration=1.0, communication=0.2, wait=0.5, compute=0.25,
                                         data=0.05))
    assert [(i.phase, round(i.start, 6), round(i.end, 6)) for i in intervals] == [
        ("communication", 9.0, 9.2), ("turn wait", 9.2, 9.7), ("compute", 9.7, 10.0)]
    # phases that took no time are left out
    assert [i.phase for i in iteration_intervals(_row(5.0, 0.1, 0.0, 0.0, 0.1))] == ["compute"]


def test_window_skips_start_up_skew_and_cuts_intervals():
    # job a waited 30 s for its partner's first turn at step 1; both then alternate every 0.1 s
    a = [_row(1.0, 1.0, 0, 0, 1.0), _row(31.0, 30.0, 0, 29.95, 0.05)] + \
        [_row(31.0 + 0.1 * k, 0.1, 0, 0.05, 0.05) for k in range(1, 20)]
    b = [_row(30.95 + 0.1 * k, 0.1, 0, 0.05, 0.05) for k in range(20)]
    (low, high), when = middle_window([a, b], iterations=8)
    assert when == "steady" and high - low == pytest.approx(0.8) and low > 31.0
    cut = intervals_in_window(a, (low, high))
    assert min(i.start for i in cut) >= low and max(i.end for i in cut) <= high
    assert sum(i.end - i.start for i in cut) == pytest.approx(0.8)


def test_overlap_says_how_much_of_the_time_jobs_ran_together():
    first = [_row(1.0 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]  # iterating from 0.9 to 1.9 s
    later = [_row(1.5 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]  # from 1.4 to 2.4 s
    assert overlap_fraction([first, later]) == pytest.approx(0.5 / 1.5)
    apart = [_row(5.0 + 0.1 * k, 0.1, 0, 0, 0.1) for k in range(10)]
    assert overlap_fraction([first, apart]) == 0.0
    (low, high), when = middle_window([first, apart])
    assert when == "apart" and high - low == pytest.approx(0.8)
    assert overlap_fraction([first]) is None


def test_the_model_from_a_run_alone_yields_at_its_layer_boundaries():
    from xover.analysis import profile_of_run
    from xover.links import Link

    job = {"name": "a", "np": 2, "compute_ms": 90.0, "data_ms": 10.0, "communication_ms": 20.0,
           "hosts": "localhost:2", "gradient_bytes": None, "comm_cpu_ms": None}
    # 50 layer boundaries in 100 ms of device time: it can give a turn up every 2 ms, as its profile says
    assert profile_of_run({**job, "checkpoints": 50}, Link.parse("1gbit")).checkpoint_ms == pytest.approx(2.0)
    assert profile_of_run({**job, "checkpoints": None}, Link.parse("1gbit")).checkpoint_ms == 1.0  # not recorded: the default


def test_the_model_from_a_run_alone_charges_communication_cpu_to_cpu_devices_only():
    from xover.analysis import profile_of_run
    from xover.links import HOST

    job = {"name": "a", "np": 2, "compute_ms": 76.0, "data_ms": 0.0, "communication_ms": 28.0,
           "hosts": "localhost:2", "gradient_bytes": None, "comm_cpu_ms": 28.0}
    # Gloo's threads copy through host memory: on CPU cores that is the partner's compute time, on a GPU it is not
    assert profile_of_run({**job, "device": "cpu"}, HOST).comm_cpu == pytest.approx(1.0)
    on_gpu = profile_of_run({**job, "device": "cuda:0"}, HOST)
    assert on_gpu.comm_cpu == 0.0 and on_gpu.device_share == pytest.approx(76.0 / 104.0)


def _row(end: float, iteration: float, communication: float, wait: float, compute: float, data: float = 0.0):
    return {"wall_time": end, "iteration_s": iteration, "communication_s": communication, "wait_s": wait,
            "compute_s": compute, "data_s": data}
