"""A Horovod script that accumulates gradients the Horovod way (it knows nothing of xover):
DistributedOptimizer(backward_passes_per_step=2), broadcast_parameters and broadcast_optimizer_state
(Adam: state to broadcast), and an LR schedule made on the DistributedOptimizer (it wraps the optimizer's step
method, as every torch scheduler does). Rank 0 prints each optimizer step's loss (the sum of its two passes'
losses) with every bit.

    horovodrun -np 2 -H localhost:2 python horovod_passes.py --steps 12
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()

PASSES = 2
hvd.init()
torch.manual_seed(11)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(24, 96), nn.Tanh(), nn.Linear(96, 96), nn.Tanh(), nn.Linear(96, 6))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     backward_passes_per_step=PASSES)
schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
if hvd.rank() == 0:
    print(f"parameter bytes {sum(p.numel() * p.element_size() for p in model.parameters())}", flush=True)

generator = torch.Generator().manual_seed(11 + hvd.rank())
for step in range(args.steps):
    optimizer.zero_grad()
    step_loss = 0.0
    for _ in range(PASSES):
        x = torch.randn(args.batch_size, 24, generator=generator)
        y = (x[:, :6].argmax(dim=1) + (x[:, 6] > 0).long()) % 6
        loss = F.cross_entropy(model(x), y) / PASSES
        loss.backward()
        step_loss += loss.item()
    optimizer.step()
    schedule.step()
    if hvd.rank() == 0:
        print(f"step {step} loss {step_loss!r}", flush=True)
