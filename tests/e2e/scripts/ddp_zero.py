"""A DDP script whose optimizer is sharded: ZeroRedundancyOptimizer over AdamW (its step updates this rank's
shard, then broadcasts every rank's), a cosine learning-rate schedule and gradient clipping, written as
PyTorch's documentation shows it - it knows nothing of xover.

    torchrun --standalone --nproc-per-node=2 tests/e2e/scripts/ddp_zero.py --steps 20
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
data = torch.Generator().manual_seed(7 + rank)
for step in range(args.steps):
    inputs, targets = torch.randn(128, 64, generator=data), torch.randint(0, 10, (128,), generator=data)
    loss = nn.functional.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
with torch.no_grad():
    final = nn.functional.cross_entropy(model(inputs), targets)
if rank == 0:
    print(f"final loss {final.item():.6f}", flush=True)
dist.destroy_process_group()
