"""The co-run measurement of `xover profile` (profile/step.py): how long the reference partner runs, and
which of the job's iterations count."""

from types import SimpleNamespace

from xover.profile.step import corun_device_ms, corun_partner_iterations


def _metrics(ends, device_s=0.1):
    return [SimpleNamespace(wall_time=end, data_s=0.0, compute_s=device_s) for end in ends]


def test_the_partner_outlasts_a_job_slowed_by_waiting_for_its_turns():
    # job 113 ms alone, partner profiled at 1280 ms of which 918 ms on the device: sized by the job's time
    # alone the partner ran 12 iterations and ended before 3 of the job's measured ones had
    assert corun_partner_iterations(12, 112.9, 918.0, 1280.0) == 20
    # a job far slower than its partner: the partner runs for twice the job's iterations at crossover speed
    assert corun_partner_iterations(12, 1000.0, 5.0, 10.0) == 2412
    assert corun_partner_iterations(12, 1.0, 1.0, 1000.0) == 12  # never fewer than the job's own
    # a job that starts slower than its partner: the partner iterates through the job's start too
    # (mlp-digits' 10 s start next to mlp-balanced: 12 iterations ran out as the job ended, on a slow machine)
    assert corun_partner_iterations(12, 33.7, 392.7, 679.5) == 16
    assert corun_partner_iterations(12, 33.7, 392.7, 679.5, job_startup_ms=10_033.0) == 45


def test_only_iterations_after_warmup_that_end_while_the_partner_runs_count():
    partner = _metrics([1.0, 2.0, 3.0])
    assert corun_device_ms(_metrics([0.5, 1.5, 2.5, 2.9, 3.5]), partner, warmup=1) == 100.0
    assert corun_device_ms(_metrics([0.5, 1.5, 2.5, 3.5, 4.0]), partner, warmup=1) is None  # 2 of them
    assert corun_device_ms(_metrics([0.5]), [], warmup=0) is None
    # a partner stopped when the job ended with iterations left was running all along, past its last whole one
    still = {"partner_still_iterating": True}
    assert corun_device_ms(_metrics([0.5, 1.5, 2.5, 3.5, 4.0]), partner, warmup=1, **still) == 100.0
    assert corun_device_ms(_metrics([0.5, 1.5, 2.5, 3.5]), [], warmup=1, **still) == 100.0
