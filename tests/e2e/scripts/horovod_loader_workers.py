"""An ImageNet-style Horovod script (imagenet_style.py): transforms that are modules, applied in the
Dataset's __getitem__, DataLoader worker processes (--workers; a new set each epoch), a DistributedSampler
with set_epoch, hvd.DistributedOptimizer. Rank 0 prints each step's loss with every bit.

    horovodrun -np 2 -H localhost:2 python horovod_loader_workers.py --workers 2 --epochs 2
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from imagenet_style import Digits, network, transforms
from torch.utils.data import DataLoader, DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--samples", type=int, default=192, help="the dataset's size (an epoch: samples / batch / ranks)")
parser.add_argument("--keep-last", action="store_true", help="keep each epoch's last, smaller batch (drop_last=False)")
parser.add_argument("--validate-every", type=int, default=0,
                    help="every N steps, a held-out batch's loss with the model in eval() and gradients on (no no_grad)")
args = parser.parse_args()

hvd.init()
torch.manual_seed(3)
torch.set_num_threads(1)
dataset = Digits(args.samples, transforms())
sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=3)
loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                    drop_last=not args.keep_last)
validation = DataLoader(Digits(48, transforms()), batch_size=24) if args.validate_every else None
model = network()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        if hvd.rank() == 0:
            print(f"step {step} loss {loss.item()!r} batch {len(labels)}", flush=True)
        step += 1
        if args.validate_every and step % args.validate_every == 0:  # a slip users make: no torch.no_grad()
            model.eval()
            images, labels = next(iter(validation))
            validated = F.cross_entropy(model(images), labels)
            if hvd.rank() == 0:
                print(f"step {step} validation {validated.item()!r}", flush=True)
            model.train()
