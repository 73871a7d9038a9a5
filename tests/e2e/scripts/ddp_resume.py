"""A DDP script that checkpoints to --out every few steps (rank 0, between barriers) and resumes from the last
checkpoint it finds there, as long runs are written: its losses depend on what an earlier run left."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--out", default=os.environ.get("RESUME_DIR", "checkpoints"))
parser.add_argument("--every", type=int, default=4)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
path = os.path.join(args.out, "last.pt")
start = 0
if os.path.exists(path):
    state = torch.load(path)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    print(f"resumed at step {start}", flush=True)
for step in range(start, args.steps):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(32, 16, generator=generator), torch.randint(0, 4, (32,), generator=generator)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.8f}", flush=True)
    if (step + 1) % args.every == 0:
        dist.barrier()
        if rank == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}, path)
        dist.barrier()
dist.destroy_process_group()
