"""A Horovod script with two DistributedOptimizers on disjoint parameters, both stepped after one backward:
AdamW for the matrices, SGD for the rest (a split as Muon-style recipes make), on synthetic data."""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--average-loss", action="store_true", help="print the loss averaged over the ranks")
args, _ = parser.parse_known_args()  # the other script's options too (one command line for both)

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(32, 128), nn.LayerNorm(128), nn.ReLU(), nn.Linear(128, 10))
named = list(model.named_parameters())
matrices = [(name, p) for name, p in named if p.ndim >= 2]
others = [(name, p) for name, p in named if p.ndim < 2]
optimizers = [
    hvd.DistributedOptimizer(torch.optim.AdamW([p for _, p in matrices], lr=1e-3), named_parameters=matrices),
    hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in others], lr=0.05, momentum=0.9), named_parameters=others),
]
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

generator = torch.Generator().manual_seed(7 + hvd.rank())
for step in range(args.steps):
    x, y = torch.randn(64, 32, generator=generator), torch.randint(0, 10, (64,), generator=generator)
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
    shown = hvd.allreduce(loss.detach(), name="loss") if args.average_loss else loss  # every rank calls it
    if hvd.rank() == 0 and step % 10 == 0:
        print(f"step {step} loss {shown.item():.8f}", flush=True)

if hvd.rank() == 0:
    print(f"final loss {shown.item():.8f}", flush=True)
