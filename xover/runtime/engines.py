"""Engine adapters: how a worker joins its job, averages gradients and waits for them (for the
built-in models), each found by the name of the engine's worker side (`Engine.runtime_name`, xover/engines.py).

Every adapter starts the all-reduce of each gradient from backward hooks (asynchronously), so
the turn can be released when backward ends while communication continues outside the turn.
`link_s` is how long the last step's all-reduces were in flight: from the first gradient of the
step to the moment the wait saw the last one done (the time the job keeps the link busy).
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

import torch

from .. import devices
from ..settings import HOST_VARIABLE, settings
from .gradient_wait import LinkClock, meet_without_spinning, wait_without_spinning


class HorovodEngine:
    """Horovod, launched by horovodrun: its DistributedOptimizer all-reduces each gradient from backward's hooks."""

    name = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.backend = "nccl" if hvd.nccl_built() and torch.cuda.is_available() else "gloo"
        self.optimizer: Any = None  # Horovod's DistributedOptimizer (untyped), once prepare() wraps one
        self.clock = LinkClock()

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Meet the job's other ranks, start every rank from rank 0's weights and optimizer state, and wrap
        the optimizer so that backward starts the all-reduces; the wrapped optimizer is the one to step."""
        hvd = self.hvd
        meet_without_spinning(hvd)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        self.clock.watch(model)
        return self.optimizer

    def wait_gradients(self) -> None:
        """Block (without spinning) until this step's all-reduces are done, then install the averages."""
        handles = [h for h, _ in self.optimizer._handles.values() if h is not None and not callable(h)]
        self.clock.sleep_through_expected()
        for handle in handles:
            wait_without_spinning(functools.partial(self.hvd.poll, handle))
        self.clock.done()
        self.optimizer.synchronize()  # returns at once now: every handle has completed

    def apply_update(self) -> None:
        """Step the optimizer on the averages wait_gradients installed, without synchronizing again."""
        with self.optimizer.skip_synchronize():
            self.optimizer.step()

    def zero_grad(self) -> None:
        """Clear the gradients for the next step."""
        self.optimizer.zero_grad()

    @property
    def link_s(self) -> float | None:
        """How long the last step's all-reduces were in flight."""
        return self.clock.link_s

    def shutdown(self) -> None:
        """Leave the job."""
        self.hvd.shutdown()


class TorchEngine:
    """torch.distributed (Gloo on CPU, NCCL on GPU unless XOVER_TORCH_BACKEND says gloo), launched by torchrun.

    DistributedDataParallel is not used: its reducer waits for the all-reduces inside backward, so
    the turn would be held through communication. Instead gradients are grouped in buckets (in the
    reverse order of the parameters, roughly the order backward produces them), and each bucket's
    all-reduce is started asynchronously from a post-accumulate hook as soon as its last gradient is
    ready, like Horovod's tensor fusion; the worker waits for them outside the turn.
    Buckets matter on a shared link: one all-reduce per parameter would queue dozens of small
    messages behind a partner's bulk transfer.

    Each bucket is one flat tensor that the gradients are views of (as DDP's gradient_as_bucket_view):
    backward accumulates into it in place and it is all-reduced as it is, so nothing is copied in or
    out. Copies cost more than they seem: gathering vgg-synthetic's 32 MB into a new tensor took 18 ms
    a step (fresh pages, 36 ms of compute), and copying the averages back 3 ms on the main thread
    outside the turn, on the core the partner computes on. The average (sum / size, as Horovod's) is
    taken in the turn, with the update.
    """

    name = "torch"
    bucket_bytes = 25 * 2**20  # DistributedDataParallel's default bucket size

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.backend = torch_backend()
        if self.backend == "nccl" and devices.devices_per_gpu() > 1:
            # NCCL refuses two ranks of a job on one GPU ("Duplicate GPU detected"); a host id of its own
            # per rank makes each rank a host of its own to NCCL, joined by its network transport.
            os.environ["NCCL_HOSTID"] = f"{os.environ.get(HOST_VARIABLE) or socket.gethostname()}-{self.local_rank}"
        dist.init_process_group(self.backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.optimizer: torch.optim.Optimizer | None = None
        self._bucket_of: dict[torch.Tensor, int] = {}
        self._buckets: list[list[torch.nn.Parameter]] = []
        self._flat: list[torch.Tensor] = []
        self._ready: list[int] = []
        self._pending: list[tuple[int, torch.distributed.Work]] = []
        self.clock = LinkClock()

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Start every rank from rank 0's weights, make the gradients views of flat buckets and hook each
        bucket's all-reduce to its last gradient; the optimizer is returned as it is."""
        with torch.no_grad():
            for tensor in list(model.parameters()) + list(model.buffers()):
                self.dist.broadcast(tensor.data, src=0)
        size = 0
        for parameter in reversed([p for p in model.parameters() if p.requires_grad]):
            first = self._buckets[-1][0] if self._buckets else None
            nbytes = parameter.numel() * parameter.element_size()
            if (
                first is None
                or size + nbytes > self.bucket_bytes
                or first.dtype != parameter.dtype
                or first.device != parameter.device
            ):
                self._buckets.append([])
                size = 0
            self._buckets[-1].append(parameter)
            self._bucket_of[parameter] = len(self._buckets) - 1
            size += nbytes
            parameter.register_post_accumulate_grad_hook(self._on_gradient)
        for bucket in self._buckets:
            flat = torch.zeros(sum(p.numel() for p in bucket), dtype=bucket[0].dtype, device=bucket[0].device)
            offset = 0
            for parameter in bucket:
                parameter.grad = flat[offset : offset + parameter.numel()].view_as(parameter)
                offset += parameter.numel()
            self._flat.append(flat)
        self._ready = [0] * len(self._buckets)
        self.optimizer = optimizer
        return optimizer

    def _on_gradient(self, parameter: torch.Tensor) -> None:
        self.clock.on_gradient()
        index = self._bucket_of[parameter]
        self._ready[index] += 1
        if self._ready[index] == len(self._buckets[index]):
            self._ready[index] = 0
            work = self.dist.all_reduce(self._flat[index], op=self.dist.ReduceOp.SUM, async_op=True)
            self._pending.append((index, work))

    def wait_gradients(self) -> None:
        """Block (without spinning) until this step's all-reduces are done."""
        self.clock.sleep_through_expected()
        for _, work in self._pending:
            wait_without_spinning(work.is_completed)
            work.wait()
        self.clock.done()

    def apply_update(self) -> None:
        """Turn each bucket's sum into the average, then step the optimizer."""
        for index, _ in self._pending:
            self._flat[index].div_(self.size)  # the average, as Horovod computes it (sum, then / size)
        self._pending.clear()
        assert self.optimizer is not None  # prepare() came first
        self.optimizer.step()

    def zero_grad(self) -> None:
        """Zero the gradients in place for the next step."""
        # zero in place: the optimizer's zero_grad would set the gradients to None and lose the views
        for flat in self._flat:
            flat.zero_()

    @property
    def link_s(self) -> float | None:
        """How long the last step's all-reduces were in flight."""
        return self.clock.link_s

    def shutdown(self) -> None:
        """Leave the process group."""
        self.dist.destroy_process_group()


def torch_backend() -> str:
    """This worker's backend: `devices.torch_backend` for whether it computes on a GPU."""
    return devices.torch_backend(torch.cuda.is_available() and not settings().cpu_only)


# the worker side of each engine, by `Engine.runtime_name`
ADAPTERS: dict[str, type[HorovodEngine] | type[TorchEngine]] = {"horovod": HorovodEngine, "torch": TorchEngine}


def adapter_for(runtime: str) -> type[HorovodEngine] | type[TorchEngine]:
    """The adapter class of the engine's worker side named `runtime`."""
    if runtime not in ADAPTERS:
        raise ValueError(f"no worker side named {runtime!r}; choose {', '.join(ADAPTERS)}")
    return ADAPTERS[runtime]
