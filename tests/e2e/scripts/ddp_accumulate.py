"""A DistributedDataParallel script with what real training loops have (it knows nothing of xover):
gradient accumulation under no_sync(), a DataLoader with worker processes, an LR schedule, a GradScaler
(losses scaled for backward, gradients unscaled before the step, a step skipped on overflow), and a checkpoint that rank 0
evaluates and writes alone while its peer waits at a barrier. Rank 0 prints each optimizer step's loss (the sum of its micro-batches'
losses, in the order backward saw them) with every bit.

    torchrun --standalone --nproc-per-node=2 ddp_accumulate.py --steps 12 --checkpoint-dir /tmp/ck
"""

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--checkpoint-dir", default=None)
parser.add_argument("--checkpoint-every", type=int, default=5)
# this step's loss times 1e36: its scaled gradients overflow and the GradScaler skips the optimizer step, as
# fp16 training meets while its scale settles
parser.add_argument("--overflow-at", type=int, default=None)
args = parser.parse_args()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(7)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(1024, 32, generator=generator)
    labels = (inputs[:, :10].argmax(dim=1) + (inputs[:, 10] > 1).long()) % 10
    dataset = TensorDataset(inputs, labels)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)

    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                                  nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu")  # (nothing overflows in float32 unless --overflow-at)
    if rank == 0:
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"parameter bytes {size}", flush=True)

    step, micro, epoch, step_loss = 0, 0, 0, 0.0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            last = (micro + 1) % args.accumulate == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss = F.cross_entropy(model(x), y) / args.accumulate * (1e36 if step == args.overflow_at else 1.0)
                scaler.scale(loss).backward()
            step_loss += loss.item()
            micro += 1
            if not last:
                continue
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            schedule.step()
            if rank == 0:
                print(f"step {step} loss {step_loss!r}", flush=True)
            if args.checkpoint_dir and (step + 1) % args.checkpoint_every == 0:
                if rank == 0:  # rank 0 alone evaluates the model it saves, as the ImageNet example does
                    with torch.no_grad():
                        held_out = F.cross_entropy(model.module(inputs[-256:]), labels[-256:]).item()
                    print(f"checkpoint {step + 1} held-out loss {held_out!r}", flush=True)
                    os.makedirs(args.checkpoint_dir, exist_ok=True)
                    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                "step": step}, os.path.join(args.checkpoint_dir, f"step{step + 1}.pt"))
                dist.barrier()  # its peers wait for it
            step, step_loss = step + 1, 0.0
            if step == args.steps:
                break
        epoch += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
