"""Probes of a GPU machine for xover's GPU check (scripts/gpu_check.sh), from the repository root:

    python3 bench/gpu/probe.py [env] [handoff] [slicing] [determinism] [--json FILE] [--cpu] [--rounds N]

  env          versions, the GPU, its compute mode, and the tools the check uses
  handoff      two processes take turns on one device through xover's turn server, synchronising the
               compute stream before each release as the worker does: release -> partner's grant, the
               drain at release, a layer-boundary checkpoint
  slicing      how much one process's GPU compute slows while another process keeps the GPU busy with
               a spinning one-thread kernel (what an NCCL all-reduce waiting for its peer is to the GPU)
               or with matrix products; contexts of two processes are time-sliced unless CUDA MPS runs
  determinism  one training step of each model the check uses, twice, with deterministic kernels:
               an operation without a deterministic kernel is named here, before a phase fails on it

--cpu runs what applies on a CPU (env, handoff) so that the probe itself is tested there.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

ON_CPU = "--cpu" in sys.argv


def _device() -> str:
    return "cpu" if ON_CPU else "cuda"


def _sync() -> None:
    import torch

    if not ON_CPU:
        torch.cuda.synchronize()


def env_info() -> dict:
    import torch

    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "kernel": os.uname().release,
        "cores": len(os.sched_getaffinity(0)),
    }
    if torch.cuda.is_available():
        info.update(
            gpus=torch.cuda.device_count(),
            device=torch.cuda.get_device_name(0),
            capability=list(torch.cuda.get_device_capability(0)),
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=compute_mode,mig.mode.current,memory.total,driver_version",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
        )
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    tools = (
        "ip",
        "tc",
        "unshare",
        "nsenter",
        "sysctl",
        "sshd",
        "nvcc",
        "nvidia-smi",
        "nvidia-cuda-mps-control",
        "torchrun",
        "horovodrun",
    )
    info["tools"] = {tool: shutil.which(tool) for tool in tools}
    return info


# ----------------------------------------------------------------------------------- handoff


def _turn_taker(path: str, slot: int, rounds: int, queue, on_cpu: bool) -> None:
    import torch

    from xover.runtime.turn_client import CrossoverToken

    device = "cpu" if on_cpu else "cuda"
    size = 256 if on_cpu else 4096
    a = torch.randn(size, size, device=device)
    synchronize = (lambda: None) if on_cpu else torch.cuda.current_stream().synchronize
    token = CrossoverToken(path, 0, slot, synchronize=synchronize)
    records = []
    for i in range(rounds):
        token.acquire()
        granted = time.perf_counter_ns()
        for _ in range(3):
            a @ a
        queued = time.perf_counter_ns()
        token.checkpoint()  # nobody asks to yield: the cost of a layer boundary
        checked = time.perf_counter_ns()
        synchronize()  # what the worker does before every release
        drained = time.perf_counter_ns()
        token.release()
        records.append((slot, i, granted, queued, checked, drained))
    token.close()
    queue.put(records)


def handoff(rounds: int = 300) -> dict:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.sock")
        server = subprocess.Popen(
            [sys.executable, "-m", "xover.turns.server", "--socket", path, "--policy", "round-robin", "--device=0=0,1"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError("the turn server did not start")
            # its later lines (the turns' spans) read and dropped: on a full stdout pipe it would block
            threading.Thread(target=server.stdout.read, daemon=True).start()
            queue = ctx.Queue()
            procs = [ctx.Process(target=_turn_taker, args=(path, slot, rounds, queue, ON_CPU)) for slot in (0, 1)]
            for proc in procs:
                proc.start()
            records = queue.get(timeout=120) + queue.get(timeout=120)
            for proc in procs:
                proc.join()
        finally:
            server.terminate()
            server.wait()
    records.sort(key=lambda r: r[2])
    skip = min(50, len(records) // 4)
    gaps = [(b[2] - a[5]) / 1000 for a, b in zip(records, records[1:]) if a[0] != b[0]][skip:]
    drain = [(r[5] - r[4]) / 1000 for r in records[skip:]]
    check = [(r[4] - r[3]) / 1000 for r in records[skip:]]
    held = [(r[5] - r[2]) / 1000 for r in records[skip:]]
    return {
        "handoffs": len(gaps),
        "release_to_grant_us_p50": statistics.median(gaps),
        "release_to_grant_us_p90": sorted(gaps)[int(0.9 * (len(gaps) - 1))],
        "drain_at_release_us_p50": statistics.median(drain),
        "checkpoint_us_p50": statistics.median(check),
        "turn_us_p50": statistics.median(held),
        "device_busy_share": sum(held) / max(1e-9, (records[-1][5] - records[skip][2]) / 1000),
    }


# ----------------------------------------------------------------------------------- slicing


def _partner(mode: str, ready, stop) -> None:
    import torch

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        if mode == "spin":
            torch.cuda._sleep(20_000_000)  # one thread spinning on the GPU, ~10 ms
        elif mode == "matmul":
            for _ in range(20):
                x @ x
        else:
            time.sleep(0.01)
        torch.cuda.synchronize()


def _timed_batches(batches: int = 30, matmuls: int = 20) -> float:
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ a
    torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(matmuls):
            a @ a
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def slicing() -> dict:
    ctx = mp.get_context("spawn")
    result = {"alone_ms": _timed_batches()}
    for mode in ("idle", "spin", "matmul"):
        ready, stop = ctx.Event(), ctx.Event()
        partner = ctx.Process(target=_partner, args=(mode, ready, stop))
        partner.start()
        ready.wait(60)
        result[f"{mode}_partner_ms"] = _timed_batches()
        stop.set()
        partner.join(30)
    result["slowdown_by_spinning_partner"] = result["spin_partner_ms"] / result["alone_ms"]
    result["slowdown_by_computing_partner"] = result["matmul_partner_ms"] / result["alone_ms"]
    return result


# ------------------------------------------------------------------------------- determinism


def _one_step(model_name: str, dataset_name: str, options: dict, dataset_options: dict, batch: int) -> list:
    import torch
    import torch.nn.functional as F

    from xover import workloads

    torch.manual_seed(3)
    dataset = workloads.build_dataset(
        dataset_name, batch_size=batch, rank=0, world_size=1, seed=3, options=dataset_options
    )
    model = workloads.build_model(model_name, dataset, options).to(_device())
    inputs, targets = (t.to(_device()) for t in dataset.batch(0))
    outputs = model(inputs)
    F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1)).backward()
    _sync()
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


MODELS = {  # what the check's phases train, at a small batch
    "resnet50": ("resnet50", "synthetic-images", {}, {"image_size": 224, "num_classes": 1000}, 4),
    "vgg16": ("vgg16", "synthetic-images", {}, {"image_size": 224, "num_classes": 1000}, 2),
    "bert": ("bert", "synthetic-tokens", {}, {"seq_len": 128, "vocab_size": 30522}, 2),
    "resnet": ("resnet", "synthetic-images", {"width": 64, "blocks_per_stage": 2}, {"image_size": 32}, 8),
    "mlp": ("mlp", "synthetic-images", {"hidden": 2048, "layers": 2}, {"image_size": 32}, 8),
}
CPU_MODELS = ("resnet", "mlp")


def determinism() -> dict:
    import torch

    from xover.runtime.worker import use_deterministic_kernels

    os.environ["XOVER_DETERMINISTIC"] = "1"
    use_deterministic_kernels()
    result = {}
    for name, (model, dataset, options, dataset_options, batch) in MODELS.items():
        if ON_CPU and name not in CPU_MODELS:
            continue
        try:
            first = _one_step(model, dataset, options, dataset_options, batch)
            second = _one_step(model, dataset, options, dataset_options, batch)
            same = all(torch.equal(a, b) for a, b in zip(first, second))
            result[name] = "identical" if same else "DIFFERENT gradients"
        except Exception as error:  # the operation without a deterministic kernel, by name
            result[name] = f"ERROR {type(error).__name__}: {str(error).splitlines()[0][:300]}"
    return result


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    out, rounds = None, 300
    if "--rounds" in args:
        index = args.index("--rounds")
        rounds = int(args[index + 1])
        del args[index : index + 2]
    if "--json" in args:
        index = args.index("--json")
        out = args[index + 1]
        del args[index : index + 2]
    probes = {
        "env": env_info,
        "handoff": lambda: handoff(rounds),
        "slicing": slicing,
        "slicing_mps": slicing,
        "determinism": determinism,
    }
    results = {}
    for name in args or ["env", "handoff", "slicing", "determinism"]:
        start = time.perf_counter()
        try:
            results[name] = probes[name]()
        except Exception as error:  # a probe that fails says so, and the others still run
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        results[name]["probe_s"] = round(time.perf_counter() - start, 1)
        print(f"[probe] {name}: {json.dumps(results[name])}", flush=True)
    if out:
        existing = json.load(open(out)) if os.path.exists(out) else {}
        existing.update(results)
        with open(out, "w") as handle:
            json.dump(existing, handle, indent=1)


if __name__ == "__main__":
    main()
