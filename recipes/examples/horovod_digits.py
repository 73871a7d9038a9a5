"""A plain Horovod training script, written the usual way - it knows nothing of xover.

Alone, and as two jobs taking turns:
    horovodrun -np 2 -H localhost:2 python recipes/examples/horovod_digits.py --steps 100
    xover run --script recipes/examples/horovod_digits.py --script recipes/examples/horovod_digits.py -- --steps 100
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--average-loss", action="store_true", help="print the loss averaged over the ranks")
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
torch.set_num_threads(1)

digits = load_digits()
images = torch.tensor(digits.images, dtype=torch.float32).reshape(-1, 64) / 16.0
labels = torch.tensor(digits.target)
shard = torch.arange(hvd.rank(), len(images), hvd.size())  # each rank its own part of the data

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

generator = torch.Generator().manual_seed(args.seed + hvd.rank())
for step in range(args.steps):
    rows = shard[torch.randint(0, len(shard), (args.batch_size,), generator=generator)]
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images[rows]), labels[rows])
    loss.backward()
    optimizer.step()
    shown = hvd.allreduce(loss.detach(), name="loss") if args.average_loss else loss  # every rank calls it
    if hvd.rank() == 0 and step % 10 == 0:
        print(f"step {step} loss {shown.item():.8f}", flush=True)

if hvd.rank() == 0:
    print(f"final loss {shown.item():.8f}", flush=True)
