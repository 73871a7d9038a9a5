"""Samples GPU 0 through NVML every PERIOD seconds into a CSV until stopped (scripts/gpu_check.sh):

    python3 bench/gpu/nvml_sampler.py OUT.csv [PERIOD]

'gpu_util' is the share of the period in which any kernel ran: a spinning NCCL kernel counts as busy.
"""

import sys
import time

import pynvml

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
with open(sys.argv[1], "w") as out:
    print("t,gpu_util,mem_util,mem_used_mib,procs,proc_mem_mib,sm_mhz,power_w", file=out, flush=True)
    while True:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError:
            procs = []
        proc_mem = sum((p.usedGpuMemory or 0) for p in procs) / 2**20
        try:
            power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000
        except pynvml.NVMLError:
            power = -1
        sm = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        print(
            f"{time.time():.3f},{util.gpu},{util.memory},{memory.used / 2**20:.0f},{len(procs)},{proc_mem:.0f},"
            f"{sm},{power:.0f}",
            file=out,
            flush=True,
        )
        time.sleep(period)
