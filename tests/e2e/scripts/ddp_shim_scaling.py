"""DDP's own reduction against the xover shim's communication hook, its wait and what it does with the gradients
after it, with no turns (a stand-in coordinator): a sparse nn.Embedding and a dense head, zero_grad() with and
without set_to_none, under plain torchrun. One line a run: a digest of the weights after the steps. At a world size
that is not a power of two (3) a multiplication by 1 / world size and DDP's division part in the last bit."""

import contextlib
import hashlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from xover.runtime import ddp_shim

dist.init_process_group("gloo")
rank = dist.get_rank()


class Coordinator:
    """What the shim's hook and waits ask of the job's coordinator, without turns."""

    active = True

    def all_reduced(self, nbytes):
        pass

    def attach(self, parameters, settle):
        pass

    def outside_turn(self):
        return contextlib.nullcontext()


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16, sparse=True)
        self.head = nn.Linear(16, 1)

    def forward(self, idx):
        return self.head(self.emb(idx).mean(1)).squeeze(1)


for set_to_none in (True, False):
    for reduction in ("ddp", "shim"):
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(50 + rank)
        crossover = None
        if reduction == "ddp":
            model = DDP(Bag())
        else:
            crossover = ddp_shim.DDPCrossover(Coordinator(), None)
            crossover.torch, crossover.dist, crossover.all_reduce = torch, dist, dist.all_reduce
            crossover._register_comm_hook = DDP.register_comm_hook
            model = DDP(Bag(), gradient_as_bucket_view=True)  # as the shim's constructor builds it
            crossover._adopt(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(10):
            idx, y = torch.randint(0, 100, (8, 5), generator=generator), torch.randn(8, generator=generator)
            optimizer.zero_grad(set_to_none=set_to_none)
            F.mse_loss(model(idx), y).backward()
            if crossover is not None:
                crossover.finish_reductions()  # where the shim waits, once the backward released the turn
            optimizer.step()
        weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
        if rank == 0:
            print(f"set_to_none={set_to_none} {reduction} {hashlib.sha256(weights).hexdigest()[:16]}", flush=True)
dist.destroy_process_group()
