"""Engine adapters: how a worker joins its job, averages gradients and waits for them.

Every adapter starts the all-reduce of each gradient from backward hooks (asynchronously), so
the turn can be released when backward ends while communication continues outside the turn.
`link_s` is how long the last step's all-reduces were in flight: from the first gradient of the
step to the moment the wait saw the last one done (the time the job keeps the link busy).
"""

from __future__ import annotations

import torch

from .gradient_wait import LinkClock, wait_without_spinning


class HorovodEngine:
    name = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.optimizer = None
        self.clock = LinkClock()

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        hvd = self.hvd
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
            wait_without_spinning(lambda h=handle: self.hvd.poll(h))
        self.clock.done()
        self.optimizer.synchronize()  # returns at once now: every handle has completed

    def apply_update(self) -> None:
        with self.optimizer.skip_synchronize():
            self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    @property
    def link_s(self) -> float | None:
        return self.clock.link_s

    def shutdown(self) -> None:
        self.hvd.shutdown()


ENGINES = {"horovod": HorovodEngine}


class TorchEngine:
    """torch.distributed (Gloo on CPU, NCCL on GPU), launched by torchrun.

    DistributedDataParallel is not used: its reducer waits for the all-reduces inside backward, so
    the turn would be held through communication. Instead gradients are grouped in buckets (in the
    reverse order of the parameters, roughly the order backward produces them), and each bucket's
    all-reduce is started asynchronously from a post-accumulate hook as soon as its last gradient is
    ready, like Horovod's tensor fusion; the worker waits for them outside the turn.
    Buckets matter on a shared link: one all-reduce per parameter would queue dozens of small
    messages behind a partner's bulk transfer.
    """

    name = "torch"
    bucket_bytes = 25 * 2**20  # DistributedDataParallel's default bucket size

    def __init__(self) -> None:
        import os

        import torch.distributed as dist

        self.dist = dist
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("XOVER_CPU_ONLY") != "1" else "gloo"
        dist.init_process_group(backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.optimizer: torch.optim.Optimizer | None = None
        self._bucket_of: dict[torch.Tensor, int] = {}
        self._buckets: list[list[torch.Tensor]] = []
        self._ready: list[int] = []
        self._pending: list[tuple[int, torch.Tensor, object]] = []
        self.clock = LinkClock()

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        with torch.no_grad():
            for tensor in list(model.parameters()) + list(model.buffers()):
                self.dist.broadcast(tensor.data, src=0)
        size = 0
        for parameter in reversed([p for p in model.parameters() if p.requires_grad]):
            if not self._buckets or size + parameter.numel() * parameter.element_size() > self.bucket_bytes:
                self._buckets.append([])
                size = 0
            self._buckets[-1].append(parameter)
            self._bucket_of[parameter] = len(self._buckets) - 1
            size += parameter.numel() * parameter.element_size()
            parameter.register_post_accumulate_grad_hook(self._on_gradient)
        self._ready = [0] * len(self._buckets)
        self.optimizer = optimizer
        return optimizer

    def _on_gradient(self, parameter: torch.Tensor) -> None:
        self.clock.on_gradient()
        index = self._bucket_of[parameter]
        self._ready[index] += 1
        if self._ready[index] == len(self._buckets[index]):
            self._ready[index] = 0
            flat = torch.cat([p.grad.reshape(-1) for p in self._buckets[index]])
            work = self.dist.all_reduce(flat, op=self.dist.ReduceOp.SUM, async_op=True)
            self._pending.append((index, flat, work))

    def wait_gradients(self) -> None:
        self.clock.sleep_through_expected()
        for _, _, work in self._pending:
            wait_without_spinning(work.is_completed)
            work.wait()
        self.clock.done()
        for index, flat, _ in self._pending:
            flat.div_(self.size)  # the average, as Horovod computes it (sum, then / size)
            offset = 0
            for parameter in self._buckets[index]:
                count = parameter.numel()
                parameter.grad.copy_(flat[offset:offset + count].view_as(parameter.grad))
                offset += count
        self._pending.clear()

    def apply_update(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    @property
    def link_s(self) -> float | None:
        return self.clock.link_s

    def shutdown(self) -> None:
        self.dist.destroy_process_group()


ENGINES["torch"] = TorchEngine
