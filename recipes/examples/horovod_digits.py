"""A plain Horovod training script, written the usual way - it knows nothing of xover.

Alone, and as two jobs taking turns:
    horovodrun -np 2 -H localhost:2 python recipes/examples/horovod_digits.py --steps 100
    xover run --script recipes/examples/horovod_digits.py --script recipes/examples/horovod_digits.py -- --steps 100

--auxiliary-every K adds a head whose loss counts on every K-th step only (its parameters get no gradient on
the others: Horovod all-reduces zeros for them in the step); --center-by-allreduce centres the hidden features
on their mean over every rank's batch, an hvd.allreduce the loss is differentiated through.
"""

import argparse
import importlib.util
import os
import types

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def load_digits():
    """scikit-learn's digits as its load_digits returns them, read from the CSV file in its package: importing
    sklearn.datasets brings in SciPy, about a CPU-second of every rank's start."""
    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return types.SimpleNamespace(images=table[:, :-1].reshape(-1, 8, 8), target=table[:, -1].astype(int))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--average-loss", action="store_true", help="print the loss averaged over the ranks")
parser.add_argument("--auxiliary-every", type=int, default=0, help="an auxiliary head used on every K-th step")
parser.add_argument("--center-by-allreduce", action="store_true", help="features centred on every rank's mean")
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
torch.set_num_threads(1)

digits = load_digits()
images = torch.tensor(digits.images, dtype=torch.float32).reshape(-1, 64) / 16.0
labels = torch.tensor(digits.target)
shard = torch.arange(hvd.rank(), len(images), hvd.size())  # each rank its own part of the data

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
auxiliary = nn.Linear(256, 10) if args.auxiliary_every else None
parameters = list(model.named_parameters())
if auxiliary is not None:
    parameters += [(f"auxiliary.{name}", parameter) for name, parameter in auxiliary.named_parameters()]
optimizer = torch.optim.SGD([parameter for _, parameter in parameters], lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=parameters)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
if auxiliary is not None:
    hvd.broadcast_parameters(auxiliary.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

generator = torch.Generator().manual_seed(args.seed + hvd.rank())
for step in range(args.steps):
    rows = shard[torch.randint(0, len(shard), (args.batch_size,), generator=generator)]
    optimizer.zero_grad()
    if auxiliary is None and not args.center_by_allreduce:
        loss = F.cross_entropy(model(images[rows]), labels[rows])
    else:
        features = model[:4](images[rows])
        if args.center_by_allreduce:
            features = features - hvd.allreduce(features.mean(dim=0), name="center")
        loss = F.cross_entropy(model[4](features), labels[rows])
        if auxiliary is not None and step % args.auxiliary_every == 0:
            loss = loss + 0.1 * F.cross_entropy(auxiliary(features), labels[rows])
    loss.backward()
    optimizer.step()
    shown = hvd.allreduce(loss.detach(), name="loss") if args.average_loss else loss  # every rank calls it
    if hvd.rank() == 0 and step % 10 == 0:
        print(f"step {step} loss {shown.item():.8f}", flush=True)

if hvd.rank() == 0:
    print(f"final loss {shown.item():.8f}", flush=True)
