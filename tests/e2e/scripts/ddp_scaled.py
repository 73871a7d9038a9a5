"""A DDP script tuned as users tune it (it knows nothing of xover): a static graph, buckets small enough that
each backward starts several all-reduces, gradients as views of their buckets, fp16 autocast with a GradScaler
whose scale starts far too high, so that most early steps overflow and are skipped (scaler.step does not call
optimizer.step), unscale_ before clipping, torchelastic's @record, a metric gathered with all_gather_object.
Rank 0 prints each step's loss with every bit.

    torchrun --standalone --nproc-per-node=2 ddp_scaled.py --steps 16
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(21)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8))
    ddp = DDP(model, static_graph=True, bucket_cap_mb=0.05, gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=4)
    generator = torch.Generator().manual_seed(400 + rank)
    skipped = 0
    for step in range(args.steps):
        x = torch.randn(32, 32, generator=generator)
        y = x[:, :8].argmax(dim=1)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(ddp(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale
        if rank == 0:
            print(f"step {step} loss {loss.item()!r}", flush=True)
    gathered = [None] * world
    dist.all_gather_object(gathered, skipped)
    if rank == 0:
        print(f"skipped {gathered}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
