"""A Horovod script whose losses follow torch's thread count in their last bits (a long sum, split between the
threads a CPU rank computes on): rank 0 prints its threads and each loss as float.hex().

    OMP_NUM_THREADS=2 horovodrun -np 2 -H localhost:2 python horovod_thread_sums.py --steps 4
"""

import argparse
import os

import horovod.torch as hvd
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()
hvd.init()
if hvd.rank() == 0:
    print(f"THREADS {torch.get_num_threads()} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 256))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
generator = torch.Generator().manual_seed(hvd.rank())
for step in range(args.steps):
    x = torch.randn(512, 256, generator=generator)
    optimizer.zero_grad()
    loss = (model(x) - x).pow(2).sum() / 1e5  # a long sum: its order follows the threads
    loss.backward()
    optimizer.step()
    if hvd.rank() == 0:
        print(f"LOSS {step} {loss.item().hex()}", flush=True)
