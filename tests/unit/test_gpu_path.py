"""The GPU path's logic that runs on any machine: devices per GPU, the GPUs CUDA_VISIBLE_DEVICES leaves
visible, the torch engine's backend, deterministic kernels, GPU sharing, the reaper's environment, MPS
refused, the devices a plan asks Slurm for."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from xover.devices import devices_per_gpu, gpu_of_device, hardware_fingerprint, local_device_count, visible_gpus
from xover.errors import XoverError
from xover.recipes import load_recipe
from xover.run.jobs import job_for
from xover.run.ranks import check_devices, crossover_warning
from xover.runtime import engines, worker

ROOT = Path(__file__).resolve().parents[2]


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
    assert crossover_warning(jobs, ["crossover"]) is None
    assert crossover_warning(jobs, ["sequential", "concurrent"]) is None


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


def test_the_reaper_gets_the_store_outside_its_command_line_and_keeps_pythonpath(tmp_path, monkeypatch):
    """A password in the store's URL must not reach the process list; the user's PYTHONPATH (where
    SQLAlchemy may live, as on the GPU machine) must reach the reaper (found by the GPU check)."""
    from xover.run.experiment import Reaper

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
    assert seen["env"]["PYTHONPATH"].split(os.pathsep) == [str(ROOT / "pythonpath"), str(tmp_path / "site")]


def test_slurm_asks_for_the_devices_the_plan_was_profiled_on_not_the_submitting_hosts(tmp_path):
    """A login node without GPUs submits a plan profiled on GPU nodes: its groups ask for GPUs."""
    from xover.plan import plan_from_dict

    body = {"format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]], "groups": [], "jobs": {},
            "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 0.0,
            "sequential_makespan_ms": 0.0}
    # the plan (typed) carries the kind its profiles were taken on; run/on_slurm.py asks Slurm for it
    assert plan_from_dict({**body, "device_kind": "gpu"}).device_kind == "gpu"
    assert plan_from_dict({**body, "engine": "torch"}).device_kind is None  # from before, or a trace: this host decides
    with pytest.raises(XoverError, match="device_kind"):
        plan_from_dict({**body, "device_kind": "tpu"})


def test_mps_refused_clearly_where_it_cannot_run(tmp_path, monkeypatch):
    from xover.run import mps

    monkeypatch.setenv("PATH", str(tmp_path))  # no control program anywhere
    monkeypatch.setattr(mps, "CONTROL_FOLDERS", ())
    with pytest.raises(XoverError, match="nvidia-cuda-mps-control was not found"):
        with mps.MpsDaemon(tmp_path / "run"):
            pass
