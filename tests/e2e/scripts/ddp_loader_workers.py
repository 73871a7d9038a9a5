"""An ImageNet-style DistributedDataParallel script (imagenet_style.py): transforms that are modules, applied
in the Dataset's __getitem__, DataLoader worker processes (--workers; a new set each epoch), a
DistributedSampler with set_epoch. Rank 0 prints each step's loss with every bit and the batch it trained on.
With --evaluate, an evaluation at the end of every epoch, as users write it: the model in eval mode, forwards
without gradients over each rank's share of a held-out set, the correct answers and the loss summed over the
ranks with dist.all_reduce (rank 0 prints both), then back to training. With --evaluate-module too, the forwards
are model.module's (the network without DDP's forward, which broadcasts rank 0's BatchNorm statistics first):
each rank evaluates with its own statistics.

    torchrun --standalone --nproc-per-node=2 ddp_loader_workers.py --workers 2 --epochs 2 [--evaluate [--evaluate-module]]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from imagenet_style import Digits, network, transforms
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--samples", type=int, default=192, help="the dataset's size (an epoch: samples / batch / ranks)")
parser.add_argument("--keep-last", action="store_true", help="keep each epoch's last, smaller batch (drop_last=False)")
parser.add_argument("--validate-every", type=int, default=0,
                    help="every N steps, a held-out batch's loss with the model in eval() and gradients on (no no_grad)")
parser.add_argument("--evaluate", action="store_true", help="evaluate on a held-out set after every epoch")
parser.add_argument("--evaluate-module", action="store_true", help="evaluate model.module, not the DDP model")
parser.add_argument("--held-out", type=int, default=640, help="the held-out set's size")
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(3)
torch.set_num_threads(1)
dataset = Digits(args.samples, transforms())
sampler = DistributedSampler(dataset, shuffle=True, seed=3)
loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                    drop_last=not args.keep_last)
held_out = Digits(args.held_out, transforms())
held_out_loader = DataLoader(held_out, batch_size=64, sampler=DistributedSampler(held_out, shuffle=False))
validation = DataLoader(Digits(48, transforms()), batch_size=24) if args.validate_every else None
model = DistributedDataParallel(network())
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item()!r} batch {len(labels)}", flush=True)
        step += 1
        if args.validate_every and step % args.validate_every == 0:  # a slip users make: no torch.no_grad()
            model.eval()
            images, labels = next(iter(validation))
            validated = F.cross_entropy(model(images), labels)
            if dist.get_rank() == 0:
                print(f"step {step} validation {validated.item()!r}", flush=True)
            model.train()
    if args.evaluate:
        evaluated = model.module if args.evaluate_module else model
        evaluated.eval()
        totals = torch.zeros(3, dtype=torch.float64)  # correct answers, images, summed loss
        with torch.no_grad():
            for images, labels in held_out_loader:
                logits = evaluated(images)
                totals += torch.tensor([(logits.argmax(1) == labels).sum().item(), len(labels),
                                        F.cross_entropy(logits, labels, reduction="sum").item()], dtype=torch.float64)
        dist.all_reduce(totals)
        if dist.get_rank() == 0:
            accuracy, loss = totals[0] / totals[1], totals[2] / totals[1]
            print(f"epoch {epoch} accuracy {accuracy.item():.4f} held-out loss {loss.item()!r}", flush=True)
        evaluated.train()
dist.destroy_process_group()
