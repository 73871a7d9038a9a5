"""A DDP script whose model is compiled, as PyTorch's documentation shows it: torch.compile over the DDP model,
or with --in-place the DDP model's own compile() (the backend is a flag: aot_eager traces as inductor does and
needs no C++ compiler) - it knows nothing of xover.

    torchrun --standalone --nproc-per-node=2 tests/e2e/scripts/ddp_compiled.py --steps 10
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--backend", default="aot_eager")
parser.add_argument("--in-place", action="store_true", help="model.compile() instead of torch.compile(model)")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
if args.in_place:
    model.compile(backend=args.backend)
    compiled = model
else:
    compiled = torch.compile(model, backend=args.backend)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.Generator().manual_seed(7 + rank)
for step in range(args.steps):
    inputs, targets = torch.randn(128, 64, generator=data), torch.randint(0, 10, (128,), generator=data)
    loss = nn.functional.cross_entropy(compiled(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
