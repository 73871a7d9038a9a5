"""The GPU path's logic that runs on any machine: devices per GPU, the GPUs CUDA_VISIBLE_DEVICES leaves
visible, the torch engine's backend, deterministic kernels, GPU sharing, what a run records of them,
and the GPU check's dry run on the CPU (scripts/gpu_check.sh --cpu)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xover.devices import devices_per_gpu, gpu_of_device, hardware_fingerprint, local_device_count, visible_gpus
from xover.errors import XoverError
from xover.recipes import load_recipe
from xover.run.jobs import check_devices, job_for, nccl_crossover_warning
from xover.runtime import engines, worker

ROOT = Path(__file__).resolve().parent.parent


def test_visible_gpus_follow_cuda_visible_devices_as_cuda_reads_it():
    assert visible_gpus(4, {}) == ["0", "1", "2", "3"]
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": "2,0"}) == ["2", "0"]
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": "-1"}) == []
    # the list ends at the first entry that names no device, or at a device named twice
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == ["1"]
    assert visible_gpus(4, {"CUDA_VISIBLE_DEVICES": "1,1,2"}) == ["1"]
    assert visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "GPU-8c6a,MIG-11ab"}) == ["GPU-8c6a", "MIG-11ab"]


def test_devices_per_gpu_is_checked_and_maps_devices_onto_gpus():
    assert devices_per_gpu({}) == 1
    assert devices_per_gpu({"XOVER_DEVICES_PER_GPU": "2"}) == 2
    for bad in ("0", "two", "-1", "1.5", "65"):
        with pytest.raises(XoverError, match="XOVER_DEVICES_PER_GPU"):
            devices_per_gpu({"XOVER_DEVICES_PER_GPU": bad})
    # K devices per GPU: device d runs on GPU d mod the GPUs, so a job's first devices spread over the GPUs
    assert [gpu_of_device(d, 1, {"XOVER_DEVICES_PER_GPU": "2"}) for d in range(2)] == [0, 0]
    assert [gpu_of_device(d, 2, {"XOVER_DEVICES_PER_GPU": "2"}) for d in range(4)] == [0, 1, 0, 1]
    assert [gpu_of_device(d, 4, {}) for d in range(4)] == [0, 1, 2, 3]


def test_a_cpu_machine_counts_cores_whatever_the_gpu_settings(monkeypatch):
    monkeypatch.setenv("XOVER_DEVICES_PER_GPU", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")
    assert local_device_count() == ("cpu", len(os.sched_getaffinity(0)))
    assert hardware_fingerprint().startswith("cpu:")


def test_torch_backend_default_override_and_refusals(monkeypatch):
    monkeypatch.delenv("XOVER_TORCH_BACKEND", raising=False)
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")
    assert engines.torch_backend() == "gloo"
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "GLOO")
    assert engines.torch_backend() == "gloo"
    for bad in ("nccl", "mpi"):  # NCCL needs a GPU; MPI is not one of xover's
        monkeypatch.setenv("XOVER_TORCH_BACKEND", bad)
        with pytest.raises(ValueError, match="XOVER_TORCH_BACKEND"):
            engines.torch_backend()


def test_launcher_refuses_a_bad_backend_before_anything_starts(monkeypatch):
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")
    job = job_for(load_recipe("mlp-synthetic"), engine="torch")
    job.devices = {"localhost": [0]}
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "nccl")
    with pytest.raises(XoverError, match="XOVER_TORCH_BACKEND=nccl needs NVIDIA GPUs"):
        check_devices([job])
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "mpi")
    with pytest.raises(XoverError, match="choose nccl"):
        check_devices([job])
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "gloo")
    check_devices([job])
    # horovod jobs do not read it
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "mpi")
    check_devices([job_for(load_recipe("mlp-synthetic"), engine="horovod")])


def test_no_nccl_warning_on_a_cpu_or_without_crossover(monkeypatch):
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")
    jobs = [job_for(load_recipe("mlp-synthetic"), engine="torch")]
    assert nccl_crossover_warning(jobs, ["crossover"]) is None
    assert nccl_crossover_warning(jobs, ["sequential", "concurrent"]) is None


def test_deterministic_kernels_are_switched_on_only_when_asked(monkeypatch):
    monkeypatch.delenv("XOVER_DETERMINISTIC", raising=False)
    assert worker.use_deterministic_kernels() is False
    monkeypatch.setenv("XOVER_DETERMINISTIC", "1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        assert worker.use_deterministic_kernels() is True
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(False)


def test_gpu_sharing_says_mps_where_the_daemon_serves_the_pipe_folder(tmp_path, monkeypatch):
    assert worker.gpu_sharing(torch.device("cpu")) is None
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert worker.gpu_sharing(torch.device("cuda", 0)) == "time-slicing"
    (tmp_path / "control").touch()  # the control daemon's pipe
    assert worker.gpu_sharing(torch.device("cuda", 0)) == "mps"


def test_a_run_records_how_it_used_its_gpu(tmp_path):
    """The worker's start record (backend, determinism, devices per GPU, sharing) reaches the runs table."""
    from xover.run.record import Recorder
    from xover.store.models import RecipeSnapshot, Run
    from xover.store.queries import run_fields
    from xover.store.session import open_store

    store = open_store(str(tmp_path / "x.db"))
    recorder = Recorder(store, "e1")
    recorder.open("run", "xover run", None, None)
    with store.session() as session, session.begin():
        snapshot = RecipeSnapshot(hash="h", name="a", path="a.toml", body={})
        session.add(snapshot)
        session.flush()
        session.add(Run(experiment_id="e1", recipe_id=snapshot.id, name="a", mode="crossover", hosts="localhost:2",
                        np=2, status="running"))
    with store.session() as session, session.begin():
        run_id = session.query(Run).one().id
    recorder.apply([(run_id, {"kind": "start", "engine": "torch", "device": "cuda:0", "backend": "gloo",
                              "deterministic": True, "devices_per_gpu": 2, "gpu_sharing": "mps"})],
                   on_record=lambda *a: None)
    with store.session() as session:
        fields = run_fields(session.get(Run, run_id))
    assert {k: fields[k] for k in ("device", "backend", "deterministic", "devices_per_gpu", "gpu_sharing")} == {
        "device": "cuda:0", "backend": "gloo", "deterministic": True, "devices_per_gpu": 2, "gpu_sharing": "mps"}


def test_the_reaper_gets_the_store_outside_its_command_line_and_keeps_pythonpath(tmp_path, monkeypatch):
    """A password in the store's URL must not reach the process list; the user's PYTHONPATH (where
    SQLAlchemy may live, as on the GPU machine) must reach the reaper (found by the GPU check)."""
    from xover.run.commands import Reaper

    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    url = "postgresql+psycopg://xover:s3cret@db.example/xover"
    seen = {}

    class FakePopen:
        def __init__(self, command, **kwargs):
            seen.update(command=command, env=kwargs["env"])

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    Reaper("e1", url)
    assert "s3cret" not in " ".join(seen["command"]) and "--db" not in seen["command"]
    assert seen["env"]["XOVER_REAPER_DB"] == url
    assert seen["env"]["PYTHONPATH"].split(os.pathsep) == [str(ROOT), str(tmp_path / "site")]


@pytest.mark.e2e
def test_gpu_check_dry_run_on_the_cpu_runs_every_phase(tmp_path):
    """scripts/gpu_check.sh --cpu: every phase but MPS (none on a CPU) with the small recipes, within
    minutes; the comparisons' losses identical to the jobs alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("XOVER_DB", "XOVER_RESULTS")}
    result = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu", "--out", str(tmp_path / "out")], cwd=ROOT,
                            env={**env, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.md").read_text()
    steps = "\n".join(line for line in result.stdout.splitlines() if line.startswith("[gpu-check"))
    for phase in ("parity", "pair-gloo", "pair-nccl", "paper", "paper-bert", "paper-twins"):
        assert f"xover run ({phase}.run): exit 0" in steps, steps + "\n" + result.stderr[-2000:]
    rows = [line.split(" | ") for line in summary.splitlines() if line.startswith("| ") and "---" not in line][1:]
    # the comparison in full once (the other pairs run crossover alone on a CPU, to stay within minutes)
    modes = [row[5] for row in rows if row[0].strip("| ") == "pair-gloo"]
    assert modes == ["sequential", "concurrent", "crossover round-robin", "crossover work-conserving"], summary
    parity = [row[12].strip(" |") for row in rows
              if row[0].strip("| ") in ("parity", "pair-gloo") and row[5].startswith("crossover")]
    assert parity and set(parity) == {"exact"}, summary
    probe = (tmp_path / "out" / "probe.json").read_text()
    assert '"handoff"' in probe and '"identical"' in probe
    assert (tmp_path / "out" / "data.tgz").stat().st_size > 0


def test_slurm_asks_for_the_devices_the_plan_was_profiled_on_not_the_submitting_hosts(tmp_path):
    """A login node without GPUs submits a plan profiled on GPU nodes: its groups ask for GPUs."""
    from xover.planner import plan_from_dict
    from xover.run.slurm import plan_device_kind

    plan = tmp_path / "plan.json"
    plan.write_text('{"device_kind": "gpu"}')
    assert plan_device_kind(str(plan)) == "gpu"
    plan.write_text('{"engine": "torch"}')  # a plan from before, or from a trace: this host decides
    assert plan_device_kind(str(plan)) is None
    assert plan_device_kind(str(tmp_path / "missing.json")) is None
    body = {"format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]], "groups": [], "jobs": {},
            "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 0.0,
            "sequential_makespan_ms": 0.0, "device_kind": "tpu"}
    with pytest.raises(XoverError, match="device_kind"):
        plan_from_dict(body)


def test_mps_refused_clearly_where_it_cannot_run(tmp_path, monkeypatch):
    from xover.run import mps

    monkeypatch.setenv("PATH", str(tmp_path))  # no control program anywhere
    monkeypatch.setattr(mps, "CONTROL_FOLDERS", ())
    with pytest.raises(XoverError, match="nvidia-cuda-mps-control was not found"):
        with mps.MpsDaemon(tmp_path / "run"):
            pass


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
