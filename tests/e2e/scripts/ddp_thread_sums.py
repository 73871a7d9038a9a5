"""A DDP script whose losses follow torch's thread count in their last bits: a long sum, split between the threads
a CPU rank computes on. Prints the threads (rank 0) and each loss as float.hex(); `--lr-from-bench`: its learning
rate from the user's own package `bench` (on their PYTHONPATH), and where that came from."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--lr-from-bench", action="store_true")
args = parser.parse_args()
lr = 0.01
if args.lr_from_bench:
    import bench  # the user's, not xover's checkout's bench/

    lr = bench.LR
dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    print(f"THREADS {torch.get_num_threads()} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    if args.lr_from_bench:
        print(f"BENCH {bench.__file__}", flush=True)
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 256)))
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
generator = torch.Generator().manual_seed(rank)
for step in range(args.steps):
    x = torch.randn(512, 256, generator=generator)
    optimizer.zero_grad()
    loss = (model(x) - x).pow(2).sum() / 1e5  # a long sum: its order follows the threads
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"LOSS {step} {loss.item().hex()}", flush=True)
dist.destroy_process_group()
