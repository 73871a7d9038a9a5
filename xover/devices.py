"""What this machine offers: how many devices of which kind, and a fingerprint of them.

A device is what one rank computes on and what turns are taken on: a GPU, or one CPU core. With
XOVER_DEVICES_PER_GPU=K each GPU counts as K devices (device d runs on GPU d mod the GPUs), so
that the ranks of one job may share a GPU: a workstation with one GPU, or a check of the GPU path.
Only the GPUs this process may use count: those of CUDA_VISIBLE_DEVICES where it is set (Slurm and
the emulated hosts set it), as CUDA numbers them.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping

from .errors import XoverError, quoted
from .settings import (
    CUDA_BY_LOCAL_RANK_VARIABLE,
    TORCH_BACKEND_VARIABLE,
    TORCH_BACKENDS,
    as_given,
    settings,
)


def devices_per_gpu(environ: Mapping[str, str] | None = None) -> int:
    """K of XOVER_DEVICES_PER_GPU (default 1): how many devices, each with its own turns, one GPU counts as."""
    return settings(environ).devices_per_gpu


def visible_gpus(total: int, environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as CUDA reads CUDA_VISIBLE_DEVICES: indices or UUIDs separated by
    commas; the list ends at the first entry that names no device (CUDA ignores the rest). Unset: all
    `total` of the machine (as indices)."""
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(index) for index in range(total)]
    visible: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if item.isdigit() and int(item) < total:
            entry = str(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            entry = item
        else:
            break
        if entry in visible:
            break  # CUDA refuses a device named twice: nothing after it is visible
        visible.append(entry)
    return visible


def _nvml_gpus() -> tuple[list[str], str | None]:
    """The visible GPUs and the first one's name, from NVML; ([], None) without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: a CPU machine
        return [], None
    try:
        gpus = visible_gpus(pynvml.nvmlDeviceGetCount())
        if not gpus:
            return [], None
        first = gpus[0]
        handle = (
            pynvml.nvmlDeviceGetHandleByIndex(int(first))
            if first.isdigit()
            else pynvml.nvmlDeviceGetHandleByUUID(first)
        )
        name = pynvml.nvmlDeviceGetName(handle)
        return gpus, name.decode() if isinstance(name, bytes) else name
    except Exception:
        return [], None
    finally:
        pynvml.nvmlShutdown()


def _nvml_uuids(gpus: list[str]) -> list[str]:
    """Each visible GPU (an index or a UUID, as CUDA_VISIBLE_DEVICES names it) as its UUID, where NVML tells it; else
    as named (a GPU named by index in one run and by UUID in another is then two names for one GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return gpus
    try:
        named = []
        for gpu in gpus:
            try:
                # NVML's index is the PCI bus order; CUDA's the same where CUDA_DEVICE_ORDER=PCI_BUS_ID, or (its
                # default, fastest first) on a machine of one kind of GPU, ties broken by the bus
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit() else None
                uuid = pynvml.nvmlDeviceGetUUID(handle) if handle is not None else gpu
                named.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
            except Exception:
                named.append(gpu)
        return named
    finally:
        pynvml.nvmlShutdown()


def physical_name(index: int, gpus: list[str], per_gpu: int, cores: list[int]) -> str:
    """What device `index` of a process is on the machine, whatever that process was shown: the GPU (`gpus`: the
    visible ones, as UUIDs where known) with its share where a GPU counts as `per_gpu` devices, else the CPU core
    a rank on it is pinned to (runtime/worker.py: device d on the d-th of the process's cores, round the list)."""
    if gpus:
        if per_gpu > 1:
            return f"gpu-{gpus[index % len(gpus)]}-share{index // len(gpus)}"
        return f"gpu-{gpus[index]}" if index < len(gpus) else f"gpu-beyond-{index}"
    return f"core{cores[index % len(cores)]}" if cores else f"device{index}"


@functools.lru_cache(maxsize=8)
def _visible_gpus(visible: str | None, cpu_only: bool) -> tuple[tuple[str, str], ...]:
    """The visible GPUs, each as CUDA_VISIBLE_DEVICES names it and as its UUID, asked of NVML once per
    CUDA_VISIBLE_DEVICES (a lease names its device each time)."""
    gpus = [] if cpu_only else _nvml_gpus()[0]
    return tuple(zip(gpus, _nvml_uuids(gpus))) if gpus else ()


def _shown_here() -> tuple[tuple[tuple[str, str], ...], int, list[int]]:
    """What this process is shown of the machine: its GPUs (as named, as UUID), the devices a GPU counts as, and
    its cores."""
    current = settings()
    gpus = _visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), current.cpu_only)
    return gpus, current.devices_per_gpu, sorted(os.sched_getaffinity(0))


def physical_device(index: int) -> str:
    """Device `index` of this process as the machine knows it (physical_name): two processes shown different GPUs
    (CUDA_VISIBLE_DEVICES) or cores (taskset) name a device they share alike, and ones they do not apart."""
    gpus, per_gpu, cores = _shown_here()
    return physical_name(index, [uuid for _, uuid in gpus], per_gpu, cores)


def shared_gpu(index: int) -> str | None:
    """Where device `index` of this process is a share of a GPU (XOVER_DEVICES_PER_GPU above 1): that GPU, as
    physical_device names a whole one; else None. A share's lease holds the GPU shared and a whole GPU's holds it
    alone, so that runs counting the GPU differently see each other."""
    gpus, per_gpu, _ = _shown_here()
    if not gpus or per_gpu <= 1:
        return None
    return physical_name(index % len(gpus), [uuid for _, uuid in gpus], 1, [])


def index_before_physical(index: int) -> int | None:
    """The index an xover from before 2026-12-08 (which leased devices by index) gave device `index` of this process
    where it ran on all of the machine: the number of the core, or of the GPU where CUDA_VISIBLE_DEVICES names it by
    number (one device a GPU); None where such a run could not have named it (a GPU by UUID, shared GPUs)."""
    gpus, per_gpu, cores = _shown_here()
    if gpus:
        if per_gpu > 1 or index >= len(gpus) or not gpus[index][0].isdigit():
            return None
        return int(gpus[index][0])
    return cores[index % len(cores)] if cores else None


def gpu_ids() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES would name them (none on a CPU machine or
    with XOVER_CPU_ONLY=1)."""
    if settings().cpu_only:
        return []
    return _nvml_gpus()[0]


def gpu_count() -> int:
    """Physical GPUs this process may use (0 on a CPU machine or with XOVER_CPU_ONLY=1)."""
    return len(gpu_ids())


def local_device_count() -> tuple[str, int]:
    """('gpu', devices) when NVIDIA GPUs are visible (GPUs x XOVER_DEVICES_PER_GPU), else ('cpu', cores
    usable by this process)."""
    gpus = gpu_count()
    if gpus > 0:
        return "gpu", gpus * devices_per_gpu()
    return "cpu", len(os.sched_getaffinity(0))


def gpu_of_device(device: int, gpus: int, environ: Mapping[str, str] | None = None) -> int:
    """The GPU (CUDA's index among the visible ones) that device `device` runs on."""
    return device % gpus if devices_per_gpu(environ) > 1 else device


def script_gpu_env(
    device_indices: list[int], gpus: list[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a script job's ranks on this host see: a script picks cuda:LOCAL_RANK itself, so CUDA shows
    local rank i the GPU of its device i (CUDA_VISIBLE_DEVICES in local-rank order), and the shim takes
    cuda:LOCAL_RANK too. Nothing when devices share GPUs (CUDA cannot show one GPU twice) or none is visible."""
    if not gpus or devices_per_gpu(environ) > 1:
        return {}
    if any(index >= len(gpus) for index in device_indices):
        return {}  # placed on devices this host does not show: left to the job's own error
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus[index] for index in device_indices), CUDA_BY_LOCAL_RANK_VARIABLE: "1"}


class TorchBackendError(XoverError, ValueError):
    """XOVER_TORCH_BACKEND names no backend this machine can use (one line for the launcher, a
    ValueError inside a worker)."""


def default_torch_backend(on_gpu: bool) -> str:
    """The torch engine's backend where XOVER_TORCH_BACKEND does not name one."""
    return "nccl" if on_gpu else "gloo"


def torch_backend(on_gpu: bool, environ: Mapping[str, str] | None = None) -> str:
    """The torch engine's backend: XOVER_TORCH_BACKEND (nccl or gloo), else NCCL on a GPU, Gloo on a
    CPU. Gloo on a GPU all-reduces through host memory, so a waiting all-reduce holds no GPU kernel
    (NCCL's kernels spin on the GPU until the peer's data arrives: docs/gpu.md)."""
    chosen = settings(environ).torch_backend
    if not chosen:
        return default_torch_backend(on_gpu)
    if chosen not in TORCH_BACKENDS:
        # as given (the setting keeps it lowercased), a password in it masked as every XOVER_* refusal masks it
        given = as_given(TORCH_BACKEND_VARIABLE, environ) or chosen
        raise TorchBackendError(f"{TORCH_BACKEND_VARIABLE}={quoted(given)}: choose nccl (GPUs) or gloo")
    if chosen == "nccl" and not on_gpu:
        raise TorchBackendError(
            f"{TORCH_BACKEND_VARIABLE}=nccl needs NVIDIA GPUs, and this machine has none visible: "
            "unset it (Gloo is used on CPUs)"
        )
    return chosen


def hardware_fingerprint() -> str:
    """What the figures depend on: the devices' model and count (and the host's CPU model); a GPU
    counted as several devices is a different machine for a profile."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    gpus, name = ([], None) if settings().cpu_only else _nvml_gpus()
    if gpus:
        per_gpu = devices_per_gpu()
        return f"gpu:{name} x{len(gpus)}" + (f" ({per_gpu} devices each)" if per_gpu > 1 else "")
    return f"cpu:{cpu} x{len(os.sched_getaffinity(0))}"
