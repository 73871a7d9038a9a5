"""A DistributedDataParallel script that logs as many do (it knows nothing of xover): after each optimizer step
its ranks gather their losses (all_gather_object), rank 0 broadcasts the mean it logs (broadcast_object_list),
and every few steps the loss is reduced to rank 0 and the ranks meet at a barrier. With --late-ms, rank 1 writes
its own log line first, as slow as a shared file system's, so rank 0 waits that long in the gather: time that
is communication (the device idles while the ranks meet), never compute. Rank 0 prints each step's loss.

    torchrun --standalone --nproc-per-node=2 ddp_logged_metrics.py --steps 8 --late-ms 60
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--late-ms", type=float, default=0.0)
args = parser.parse_args()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(3)
    torch.set_num_threads(1)
    features = torch.randn(64 * world_size, 32)
    labels = (features[:, :4].sum(1) > 0).long()
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        rows = slice((step * world_size + rank) * 16 % len(features), None)
        x, y = features[rows][:16], labels[rows][:16]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 1 and args.late_ms:
            time.sleep(args.late_ms / 1000)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, loss.item())
        mean = [sum(gathered) / world_size] if rank == 0 else [None]
        dist.broadcast_object_list(mean, src=0)
        if step % 4 == 3:
            total = loss.detach().clone()
            dist.reduce(total, dst=0)
            dist.barrier()
        if rank == 0:
            print(f"step {step} loss {loss.item():.17g} mean {mean[0]:.17g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
