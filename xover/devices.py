"""What this machine offers: how many devices of which kind, and a fingerprint of them."""

from __future__ import annotations

import os
import platform


def local_device_count() -> tuple[str, int]:
    """('gpu', n) when NVIDIA GPUs are visible, else ('cpu', cores usable by this process)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        if count > 0 and os.environ.get("XOVER_CPU_ONLY") != "1":
            return "gpu", count
    except Exception:  # no driver, no library: a CPU machine
        pass
    return "cpu", len(os.sched_getaffinity(0))


def hardware_fingerprint() -> str:
    """What the figures depend on: the devices' model and count (and the host's CPU model)."""
    kind, count = local_device_count()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    if kind == "gpu":
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            name = name.decode() if isinstance(name, bytes) else name
        finally:
            pynvml.nvmlShutdown()
        return f"gpu:{name} x{count}"
    return f"cpu:{cpu} x{count}"
