"""The GPU path through the store, processes and the CLI on any machine: what a run records of its GPU use, an MPS
daemon's life around a run (with a stand-in for NVIDIA's control program), and --mps refused where there is none."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import recorded_runs

from xover.records import StartRecord
from xover.runtime import worker

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_records_how_it_used_its_gpu(tmp_path):
    """The worker's start record (backend, determinism, devices per GPU, sharing) reaches the runs table."""
    from xover.store.models import Run
    from xover.store.queries import run_fields

    store, recorder, [run_id] = recorded_runs(tmp_path, [
        {"name": "a", "mode": "crossover", "hosts": "localhost:2", "np": 2, "status": "running"}])
    recorder.apply([(run_id, StartRecord(engine="torch", device="cuda:0", backend="gloo", deterministic=True,
                                         devices_per_gpu=2, gpu_sharing="mps"))])
    with store.session() as session:
        fields = run_fields(session.get(Run, run_id))
    assert {k: fields[k] for k in ("device", "backend", "deterministic", "devices_per_gpu", "gpu_sharing")} == {
        "device": "cuda:0", "backend": "gloo", "deterministic": True, "devices_per_gpu": 2, "gpu_sharing": "mps"}


def test_mps_daemon_of_a_run_is_started_seen_by_its_workers_and_stopped(tmp_path, monkeypatch):
    """The daemon's life around a run, with a stand-in for NVIDIA's control program (the daemon itself
    needs a GPU): started with -d and the run's own pipe folder, visible to the workers' check, told
    to quit at the end, and the environment as it was."""
    from xover.run import mps

    log = tmp_path / "calls"
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text(f'#!/bin/sh\nif [ "$1" = -d ]; then touch "$CUDA_MPS_PIPE_DIRECTORY/control"; '
                       f'echo start >>{log}; else echo "stop $(cat)" >>{log}; fi\n')
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(mps, "gpu_count", lambda: 1)
    with mps.MpsDaemon(tmp_path / "run") as daemon:
        assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "run" / "mps-pipe")
        assert worker.gpu_sharing(torch.device("cuda", 0)) == "mps"
        assert daemon.pipes.stat().st_mode & 0o777 == 0o700
    assert log.read_text().split("\n")[:2] == ["start", "stop quit"]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


def test_run_with_mps_where_there_is_none_is_one_line_exit_2_and_records_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "mlp-digits", "--mode",
                             "concurrent", "--iterations", "3", "--mps"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PATH": os.path.dirname(sys.executable) + ":/bin:/usr/bin"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "--mps" in result.stderr and "Traceback" not in result.stderr
    assert not Path(os.environ["XOVER_DB"]).exists()  # nothing recorded


def test_the_mps_daemon_carries_the_runs_tag_so_that_the_reaper_stops_it(tmp_path, monkeypatch):
    """Issue 52, finding 11. Before: the daemon xover started carried no XOVER_EXPERIMENT, so a killed
    xover's reaper, which stops what carries the run's tag, left it running."""
    from xover.processes import kill_tagged, tagged_processes
    from xover.run import mps

    control = tmp_path / "nvidia-cuda-mps-control"  # -d: a daemon that stays, as NVIDIA's does
    control.write_text('#!/bin/sh\nif [ "$1" = -d ]; then setsid sleep 300 >/dev/null 2>&1 < /dev/null & fi\n')
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(mps, "gpu_count", lambda: 1)
    tag = f"mps-tag-{os.getpid()}"
    daemon = mps.MpsDaemon(tmp_path / "run", tag)
    daemon.__enter__()
    try:
        deadline = time.monotonic() + 10
        while not tagged_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        [pid] = tagged_processes(tag)
        kill_tagged(tag)  # what the reaper does
        deadline = time.monotonic() + 10
        while tagged_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not tagged_processes(tag)
    finally:
        daemon._restore()
        for pid in tagged_processes(tag):
            os.kill(pid, 9)


# ---------------------------------------------------------------------------------------------
# Issue 58: the MPS daemon's start and folders
# ---------------------------------------------------------------------------------------------

def _stand_in_control(tmp_path, monkeypatch, on_start="touch \"$CUDA_MPS_PIPE_DIRECTORY/control\""):
    from xover.run import mps

    control = tmp_path / "bin" / "nvidia-cuda-mps-control"
    control.parent.mkdir(exist_ok=True)
    control.write_text(f'#!/bin/sh\nif [ "$1" = -d ]; then {on_start}; fi\n')
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{control.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.setattr(mps, "gpu_count", lambda: 1)
    return mps


def test_an_mps_daemon_that_does_not_start_in_time_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """Before: subprocess.TimeoutExpired, a traceback."""
    from xover.errors import XoverError

    mps = _stand_in_control(tmp_path, monkeypatch, on_start="exec sleep 30")
    monkeypatch.setattr(mps, "START_TIMEOUT_S", 1.0)
    with pytest.raises(XoverError) as refused:
        with mps.MpsDaemon(tmp_path / "run"):
            pytest.fail("the run went on without its daemon")
    message = str(refused.value)
    assert message.startswith("--mps: the MPS control daemon did not start within 1 s") and "\n" not in message
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ  # the environment as it was


@pytest.mark.parametrize("planted", ["link", "file"])
def test_the_mps_daemons_folder_is_never_one_someone_else_put_there(tmp_path, monkeypatch, planted):
    """A results root may be shared. Before: a link (or anything) in place of the daemon's pipe folder was
    used as it was: the daemon's pipes and log went wherever it pointed."""
    from xover.errors import XoverError

    mps = _stand_in_control(tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    run = tmp_path / "run"
    run.mkdir()
    if planted == "link":
        (run / "mps-pipe").symlink_to(elsewhere)
    else:
        (run / "mps-pipe").write_text("")
    with pytest.raises(XoverError, match=r"mps-pipe, the MPS daemon's folder, is (a link|not a folder)"):
        with mps.MpsDaemon(run):
            pass
    assert list(elsewhere.iterdir()) == []


def test_an_mps_folder_of_ones_own_open_to_others_is_made_private_first(tmp_path, monkeypatch):
    mps = _stand_in_control(tmp_path, monkeypatch)
    (tmp_path / "run" / "mps-log").mkdir(parents=True)
    (tmp_path / "run" / "mps-log").chmod(0o777)
    with mps.MpsDaemon(tmp_path / "run") as daemon:
        assert stat.S_IMODE(daemon.logs.stat().st_mode) == 0o700 and stat.S_IMODE(daemon.pipes.stat().st_mode) == 0o700


def test_another_users_mps_folder_is_refused(tmp_path, monkeypatch):
    from xover.errors import XoverError

    if os.geteuid() != 0:
        pytest.skip("needs root: the folder belongs to another user")
    mps = _stand_in_control(tmp_path, monkeypatch)
    (tmp_path / "run" / "mps-pipe").mkdir(parents=True, mode=0o700)
    os.chown(tmp_path / "run" / "mps-pipe", 65534, 65534)
    with pytest.raises(XoverError, match="belongs to uid 65534, not to you"):
        with mps.MpsDaemon(tmp_path / "run"):
            pass


def test_a_group_planned_under_mps_asks_its_slurm_job_for_a_daemon_of_its_own(tmp_path):
    """--launcher slurm --mode planned: each group the plan put under MPS starts its daemon on its node
    (its job reads the run's modes and the group's pick in its request); the others, and other modes, do not."""
    from xover.run.batch import planned_under_mps
    from xover.run.jobs import GroupToRun

    def command(sharing, modes):
        return ["--mps"] if planned_under_mps(GroupToRun(index=0, jobs=[], sharing=sharing), modes) else []

    assert "--mps" in command("mps", ("planned",))
    assert "--mps" not in command("crossover", ("planned",))
    assert "--mps" not in command("mps", ("concurrent",))


def test_an_interrupt_while_the_mps_daemon_starts_stops_it(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM while `nvidia-cuda-mps-control -d` runs: no __exit__ follows a failed __enter__,
    so the daemon is told to quit there, and the environment is left as it was."""
    import signal
    import threading

    from xover.run.supervise import Interrupted, interruptible

    calls = tmp_path / "calls"
    mps = _stand_in_control(tmp_path, monkeypatch, on_start=f"echo start >> {calls}; exec sleep 30")
    control = tmp_path / "bin" / "nvidia-cuda-mps-control"
    control.write_text(control.read_text().replace("fi\n", f"else echo \"stop $(cat)\" >> {calls}; fi\n"))

    def interrupt_once_started():
        while not calls.exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(Interrupted), interruptible():
        with mps.MpsDaemon(tmp_path / "run"):
            pytest.fail("the run went on")
    assert calls.read_text().splitlines() == ["start", "stop quit"]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
