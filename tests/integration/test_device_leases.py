"""Device leases name what a device is on this machine (its core, its GPU), not its index among what one process
was shown: runs under different `taskset`s or CUDA_VISIBLE_DEVICES, or naming this machine differently, see each
other's leases on the devices they share, and none on those they do not."""

import fcntl
import json
import os
import socket
import subprocess
import sys

import pytest

from xover.devices import physical_name
from xover.run.leases import DeviceLeases
from xover.settings import LEASE_DIR_VARIABLE

XOVER = [sys.executable, "-m", "xover"]


@pytest.fixture
def lease_folder(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(LEASE_DIR_VARIABLE, str(folder))
    return folder


def _hold_under_taskset(core: int, index: int, holder: str) -> tuple[subprocess.Popen, dict]:
    """`taskset -c CORE`: a process shown that one core leases its device `index` (xover.run.leases, as another
    machine's run leases this host's devices) and holds it until its stdin closes."""
    process = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-m", "xover.run.leases", str(index)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    process.stdin.write(json.dumps({"holder": holder}) + "\n")
    process.stdin.flush()
    return process, json.loads(process.stdout.readline())


def test_a_core_is_one_lease_whatever_index_each_run_gives_it(lease_folder):
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores (every machine of ours has them)"
    # a run under `taskset -c <second core>`: its device 0 is the core this process calls device 1
    held, said = _hold_under_taskset(cores[1], 0, "the taskset run")
    try:
        assert said == {"held": [0]}, said
        here = DeviceLeases("this run")
        busy = here.try_acquire([("localhost", 1)])  # it was leased as localhost-1 and this one's 1 went free
        assert list(busy) == [("localhost", 1)] and "the taskset run" in busy[("localhost", 1)], busy
        assert here.try_acquire([("localhost", 0)]) == {}  # the first core: nobody's
        # refused, the device named with the core it is on (the other run calls it device 0)
        refused = subprocess.run([*XOVER, "run", "--group", "mlp-digits", "--np", str(len(cores)), "--iterations",
                                  "1", "--mode", "sequential"], capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"device localhost:1 (core {cores[1]}) is in use by pid {held.pid}: the taskset run" in refused.stderr
        here.release()
    finally:
        held.stdin.close()
        held.wait(30)


def test_a_run_under_taskset_finds_the_core_another_run_holds(lease_folder):
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores (every machine of ours has them)"
    here = DeviceLeases("the plain run")
    assert here.try_acquire([("localhost", 1)]) == {}
    try:
        # its device 0 is this one's device 1: the same core, refused (both leased "device 0" and "device 1" apart)
        held, said = _hold_under_taskset(cores[1], 0, "the taskset run")
        held.stdin.close()
        held.wait(30)
        assert list(said) == ["busy"] and "the plain run" in said["busy"]["0"], said
        # and this machine by another of its names is the same machine
        other = DeviceLeases("named by its host name")
        assert list(other.try_acquire([(socket.gethostname(), 1)])) == [(socket.gethostname(), 1)]
        assert other.try_acquire([(socket.gethostname(), 0)]) == {}
        other.release()
    finally:
        here.release()


def test_two_devices_of_one_run_on_one_core_share_its_lease(lease_folder):
    cores = sorted(os.sched_getaffinity(0))
    # more devices than cores: device d is on core d mod the cores (runtime/worker.py), one lease for both
    run = DeviceLeases("more ranks than cores")
    devices = [("localhost", index) for index in range(len(cores) + 1)]
    assert run.try_acquire(devices) == {}
    assert len({names for names in run.held.values()}) == len(cores)  # by core (and an older xover's name of it)
    run.release([("localhost", len(cores))])  # the core still holds device 0
    assert list(DeviceLeases("another").try_acquire([("localhost", 0)])) == [("localhost", 0)]
    run.release()
    assert DeviceLeases("another").try_acquire([("localhost", 0)]) == {}


def _doctors_devices_in_use(*prefix: str) -> str:
    done = subprocess.run([*prefix, *XOVER, "doctor", "--json"], capture_output=True, text=True, timeout=120)
    checks = {check["name"]: check for check in json.loads(done.stdout)["checks"]}
    return checks["devices in use"]["detail"]


def test_doctor_names_every_core_held_whatever_it_is_shown(lease_folder):
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores (every machine of ours has them)"
    held, said = _hold_under_taskset(cores[1], 0, "the taskset run")
    try:
        assert said == {"held": [0]}, said
        # shown every core, it names the held one by its index here and by its core
        assert _doctors_devices_in_use() == f"localhost:1 (core {cores[1]}) by pid {held.pid}: the taskset run"
        # shown the first core alone, it still names the other's, held (it said "none")
        assert _doctors_devices_in_use("taskset", "-c", str(cores[0])) == (
            f"core {cores[1]}, not among this process's devices by pid {held.pid}: the taskset run")
    finally:
        held.stdin.close()
        held.wait(30)
    assert _doctors_devices_in_use() == "none"


def _hold_as_before_physical(folder, number: int):
    """A lease as an xover from before 2026-12-08 took it: its device `number`, by index."""
    fd = os.open(folder / f"xover-lease-localhost-{number}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    os.fchmod(fd, 0o666)  # as xover makes them: every user writes who holds it
    os.write(fd, json.dumps({"pid": 4242, "holder": "an older xover"}).encode())
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_leases_of_an_older_xover_by_index_and_todays_by_core_see_each_other(lease_folder):
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores (every machine of ours has them)"
    older = _hold_as_before_physical(lease_folder, cores[1])  # an older run on all of the machine: core N, index N
    try:
        busy = DeviceLeases("today's").try_acquire([("localhost", 1)])
        assert busy == {("localhost", 1): "pid 4242: an older xover"}, busy
        assert _doctors_devices_in_use() == f"device {cores[1]} of an xover from before 2026-12-08 by pid 4242: an " \
                                            "older xover"
    finally:
        os.close(older)
    todays = DeviceLeases("today's")
    assert todays.try_acquire([("localhost", 1)]) == {}
    try:
        # an older xover finds it busy under the name it knows; doctor shows it once, as today's
        fd = os.open(lease_folder / f"xover-lease-localhost-{cores[1]}.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        assert _doctors_devices_in_use() == f"localhost:1 (core {cores[1]}) by pid {os.getpid()}: today's"
    finally:
        todays.release()
    assert DeviceLeases("another").try_acquire([("localhost", 1)]) == {}


def test_a_gpu_held_whole_and_its_shares_exclude_each_other(lease_folder, monkeypatch):
    # two GPUs as NVML would show them (no GPU here: the names are what this test is about)
    monkeypatch.setattr("xover.devices._visible_gpus", lambda visible, cpu_only: (("GPU-aa", "GPU-aa"),
                                                                                  ("GPU-bb", "GPU-bb")))
    monkeypatch.setenv("XOVER_DEVICES_PER_GPU", "1")
    whole = DeviceLeases("the whole GPU bb")
    assert whole.try_acquire([("localhost", 1)]) == {}
    monkeypatch.setenv("XOVER_DEVICES_PER_GPU", "2")  # devices 0-3: aa, bb, aa, bb; 3 is bb's second share
    shares = DeviceLeases("a share of bb")
    busy = shares.try_acquire([("localhost", 3)])
    assert list(busy) == [("localhost", 3)] and "the whole GPU bb" in busy[("localhost", 3)], busy
    assert shares.try_acquire([("localhost", 2)]) == {}  # a share of aa: nobody's
    whole.release()
    assert shares.try_acquire([("localhost", 3)]) == {}
    other_share = DeviceLeases("bb's first share")
    assert other_share.try_acquire([("localhost", 1)]) == {}  # shares of one GPU go together
    assert other_share.try_acquire([("localhost", 3)]) != {}  # not the same share twice
    monkeypatch.setenv("XOVER_DEVICES_PER_GPU", "1")
    busy = DeviceLeases("the whole GPU again").try_acquire([("localhost", 1)])
    assert busy == {("localhost", 1): "runs holding shares of it (XOVER_DEVICES_PER_GPU)"}, busy
    shares.release()
    other_share.release()
    again = DeviceLeases("the whole GPU again")
    assert again.try_acquire([("localhost", 1)]) == {}
    again.release()


@pytest.mark.parametrize(("index", "gpus", "per_gpu", "cores", "named"), [
    (1, [], 1, [4, 7], "core7"),
    (3, [], 1, [4, 7], "core7"),  # round the list, as a rank is pinned
    (0, ["GPU-aa", "GPU-bb"], 1, [0], "gpu-GPU-aa"),
    (1, ["GPU-aa", "GPU-bb"], 1, [0], "gpu-GPU-bb"),
    (3, ["GPU-aa", "GPU-bb"], 2, [0], "gpu-GPU-bb-share1"),  # the second device of the second GPU
    (1, ["GPU-aa", "GPU-bb"], 2, [0], "gpu-GPU-bb-share0"),  # a share, never the whole GPU's name
    (2, ["GPU-aa"], 1, [0], "gpu-beyond-2"),  # a device this process is not shown: no GPU's name
])
def test_a_device_is_named_by_its_core_or_gpu(index, gpus, per_gpu, cores, named):
    assert physical_name(index, gpus, per_gpu, cores) == named
