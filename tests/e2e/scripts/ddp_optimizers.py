"""A DDP script whose optimizer steps are not one per backward: `--optimizer split` updates the matrices with
AdamW and the rest with SGD (two optimizer.step() calls on one backward, each with its LR scheduler);
`--optimizer lbfgs` steps LBFGS with a closure given by position (forward and backward several times inside
one step). Rank 0 prints each step's loss once both (or the closure's evaluations) are done."""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--optimizer", choices=["split", "lbfgs"], default="split")
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.Tanh(), nn.Linear(64, 4)))
if args.optimizer == "split":
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    others = [p for p in model.parameters() if p.ndim < 2]
    optimizers = [torch.optim.AdamW(matrices, lr=1e-3), torch.optim.SGD(others, lr=0.05, momentum=0.9)]
    schedulers = [torch.optim.lr_scheduler.CosineAnnealingLR(optimizers[0], T_max=args.steps),
                  torch.optim.lr_scheduler.StepLR(optimizers[1], step_size=3, gamma=0.8)]
else:
    lbfgs = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=5)
for step in range(args.steps):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 4, generator=generator)
    if args.optimizer == "split":
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for optimizer, scheduler in zip(optimizers, schedulers):
            optimizer.step()
            scheduler.step()
    else:
        def closure(x=x, y=y):
            lbfgs.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        loss = lbfgs.step(closure)
    if rank == 0:
        print(f"step {step} loss {loss.item():.8f}", flush=True)
dist.destroy_process_group()
