"""What a profile reads as its job's communication CPU: the machine's busy cores while the job runs, less
xover's own and less what kept the machine busy before the job started (profile/step.py MachineLoad)."""

import subprocess
import sys
import time

import pytest

from xover.profile.step import MachineLoad, comm_cpu_ms_of


def test_the_load_before_the_run_is_not_charged_to_the_job():
    load = MachineLoad(baseline_s=0)
    load.baseline_cores = 1.0  # another user's job kept one core busy before the profile's run started
    # while the job ran: 1.6 cores busy in all over 2 s, xover itself 0.2 cpu-s of it
    load.samples = [(100.0, 50.0, 1.0), (101.0, 51.6, 1.1), (102.0, 53.2, 1.2)]
    assert abs(load.busy_cores(100.0, 102.0) - 0.5) < 1e-9  # (3.2 - 0.2) / 2 - 1.0
    load.baseline_cores = 2.0  # never below nothing
    assert load.busy_cores(100.0, 102.0) == 0.0
    # a job computing 10 ms of its 20 ms iteration on each of its 2 ranks, with 0.5 cores busy in all: no CPU left
    # for its communication; with no baseline taken off, 1.5 cores: 5 ms per iteration and rank
    summary = {"window": (100.0, 102.0), "data_ms": 0.0, "compute_ms": 10.0, "iteration_ms": 20.0}
    load.baseline_cores = 1.0
    assert comm_cpu_ms_of(summary, load, 2, "cpu") == 0.0
    load.baseline_cores = 0.0
    assert abs(comm_cpu_ms_of(summary, load, 2, "cpu") - 5.0) < 1e-9


def test_a_busy_machine_before_the_run_is_read_as_its_baseline():
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)  # both started
        with MachineLoad(every_s=0.05, baseline_s=0.5) as load:
            pass
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    # two busy loops on this machine's cores: at least a fair share of them, whatever else the machine runs
    assert load.baseline_cores > 0.25, load.baseline_cores
    with MachineLoad(every_s=0.05, baseline_s=0) as quiet:
        pass
    assert quiet.baseline_cores == 0.0


def test_a_machine_busy_before_the_run_is_said_over_a_quarter_of_its_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    load = MachineLoad(baseline_s=0)
    load.baseline_cores = 0.9  # under a quarter of 4 cores: the subtraction is enough
    assert load.busy_before is None
    load.baseline_cores = 2.0
    assert load.busy_before == 0.5


def test_the_profile_table_warns_of_a_busy_machine(capsys):
    from xover.views import show_profiles

    row = {"name": "mlp-digits", "compute_fraction": 0.3, "busy_before": 0.99, "reused": False}
    show_profiles([row, {**row, "name": "quiet", "busy_before": None}], as_json=False)
    out = capsys.readouterr().out
    assert "mlp-digits: 99% of this machine's cores were busy with other work" in out.replace("\n", " ")
    assert "quiet:" not in out


def test_a_profile_still_warming_up_is_told_from_one_that_settled():
    """On an H200 over Gloo on a shaped link a job's steps went 370 to 175 ms over the five a profile measured,
    and settled at 150 ms from step 9 (2026-12-04): the figures were the ramp's, and the model's with them."""
    from xover.profile.step import still_settling

    ramp = [1.594, 0.105, 0.467, 0.370, 0.302, 0.247, 0.208, 0.175]
    assert still_settling(ramp, 3) == pytest.approx((370.0, 175.0))
    settled = [0.961, 0.186, 0.347, 0.287, 0.231, 0.181, 0.173, 0.169, 0.160, 0.151, 0.153, 0.148, 0.151, 0.150]
    assert still_settling(settled, 8) is None  # past the ramp: steady within a fifth
    noisy = [0.5, 0.1, 0.1, 0.12, 0.09, 0.11, 0.1, 0.13, 0.09, 0.1]  # a CPU profile's spread is not a ramp
    assert still_settling(noisy, 2) is None
    assert still_settling([0.3, 0.2, 0.1], 1) is None  # fewer than 3 measured: nothing to tell
    slower = [0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2]  # slowing down is another machine's load, said elsewhere
    assert still_settling(slower, 1) is None


def test_the_profile_table_warns_of_a_job_still_warming_up(capsys):
    from xover.views import show_profiles

    row = {"name": "resnet50-bf16", "compute_fraction": 0.3, "busy_before": None, "settling": (370.0, 175.0),
           "reused": False}
    show_profiles([row, {**row, "name": "steady", "settling": None}], as_json=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "resnet50-bf16: its steps were still getting faster after the warm-up (370 ms a step at first, 175 ms" in out
    assert "--warmup" in out and "steady:" not in out
