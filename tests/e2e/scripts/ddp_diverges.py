"""A DDP script that diverges: rank 0 feeds one infinite input at step --diverge-at, the all-reduce spreads it to
every rank's weights, and every loss from then on is NaN. The job still finishes, as under plain torchrun.

    torchrun --standalone --nproc-per-node=2 tests/e2e/scripts/ddp_diverges.py --steps 8 --diverge-at 3
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--diverge-at", type=int, default=3)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)
for step in range(args.steps):
    inputs, targets = torch.randn(8, 16, generator=data), torch.randn(8, 1, generator=data)
    if step == args.diverge_at and rank == 0:
        inputs[0, 0] = float("inf")
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step} loss {loss.item()}", flush=True)
dist.destroy_process_group()
