"""DDP's own reduction against the xover shim's communication hook, its wait and what it does with the gradients
after it, with no turns (a stand-in coordinator), under plain torchrun. One line a run: a digest of rank 0's weights
after the steps. At a world size that is not a power of two (3) a multiplication by 1 / world size and DDP's division
part in the last bit.

  bag      a sparse nn.Embedding and a dense head, zero_grad() with and without set_to_none, with and without
           gradient_as_bucket_view (asked by the script: DDP divides a gradient that is already a view of its
           bucket, kept between steps by set_to_none=False, and multiplies one it copies in)
  unused   find_unused_parameters, two reducing backwards a step, an auxiliary head used only in the first: in
           the second it is unused on every rank, and DDP without views leaves its gradient as the first left it
           (averaged once); with views it is a view of its bucket, reduced again with the rest
  static   a static graph whose auxiliary head no forward uses, each rank's own gradient in it from a backward
           before DDP was built: DDP without views leaves it in the first iteration, with views averages it"""

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
    backward_depth = 1  # the script's own backwards, none inside another

    def end_of_backward(self):
        pass

    def all_reduced(self, nbytes):
        pass

    def attach(self, parameters, settle):
        pass

    def outside_turn(self):
        return contextlib.nullcontext()


class Bag(nn.Module):
    uses_aux = False

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16, sparse=True)
        self.head = nn.Linear(16, 1)

    def forward(self, idx):
        return self.head(self.emb(idx).mean(1)).squeeze(1)


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 6)
        self.head = nn.Linear(6, 1)
        self.aux = nn.Linear(6, 1)
        self.uses_aux = True

    def forward(self, x):
        hidden = torch.tanh(self.body(x))
        out = self.head(hidden).squeeze(1)
        return out + self.aux(hidden).squeeze(1) if self.uses_aux else out


def backward(model, crossover, loss):
    if crossover is not None:  # what the coordinator runs as a backward begins
        crossover.finish_reductions()
        crossover._remember_gradients()
    loss.backward()
    if crossover is not None:
        crossover.finish_reductions()  # where the shim waits, once the backward released the turn


def train(shape, set_to_none, views, reduction):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(50 + rank)
    made = Bag() if shape == "bag" else Unused()
    options = {"find_unused_parameters": True} if shape == "unused" else {}
    if shape == "static":
        options = {"static_graph": True}
        made.uses_aux = True
        F.mse_loss(made(torch.randn(8, 6) + rank), torch.randn(8)).backward()  # the rank's own gradients
        made.uses_aux = False
    crossover = None
    if reduction == "ddp":
        model = DDP(made, gradient_as_bucket_view=views, **options)
    else:
        crossover = ddp_shim.DDPCrossover(Coordinator(), None)
        crossover.bind()  # as install() does, nothing of torch adapted
        # as the shim's constructor builds it: views, and where the script did not ask for them its gradients back
        parameters = [] if views else list(made.parameters())
        model = ddp_shim._gradients_given_back(parameters, lambda: DDP(made, gradient_as_bucket_view=True, **options))
        model._xover_views_asked = views
        crossover._adopt(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        if step or shape != "static":
            optimizer.zero_grad(set_to_none=set_to_none)
        if shape == "bag":
            idx, y = torch.randint(0, 100, (8, 5), generator=generator), torch.randn(8, generator=generator)
            backward(model, crossover, F.mse_loss(model(idx), y))
        elif shape == "static":
            x, y = torch.randn(8, 6, generator=generator), torch.randn(8, generator=generator)
            backward(model, crossover, F.mse_loss(model(x), y))
        else:
            x, y = torch.randn(8, 6, generator=generator), torch.randn(8, generator=generator)
            made.uses_aux = True
            backward(model, crossover, F.mse_loss(model(x), y))
            made.uses_aux = False
            backward(model, crossover, F.mse_loss(model(x), y))
        optimizer.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()
    if rank == 0:
        print(f"{shape}/set_to_none={set_to_none}/views={views} {reduction} {hashlib.sha256(weights).hexdigest()[:16]}",
              flush=True)


for shape in ("bag", "unused", "static"):
    for set_to_none in (True, False):
        for views in (False, True):
            for reduction in ("ddp", "shim"):
                train(shape, set_to_none, views, reduction)
dist.destroy_process_group()
