"""A DistributedDataParallel script whose rank 1 leaves after its third step: by default it dies without a word
(os._exit(3)); with `--code 0 --after 8` its script ends cleanly after its eighth step (sys.exit(0)). Either way
rank 0's next all-reduce fails with gloo's 'Connection reset by peer' (or 'closed'), a knock-on. `xover run`
blames rank 1: with its code, as torchrun's summary does; as a rank that left early, which no launcher says."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--code", type=int, default=3)
parser.add_argument("--after", type=int, default=3)  # steps
args = parser.parse_args()

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    if step == args.after - 1 and dist.get_rank() == 1:
        if args.code == 0:
            sys.exit(0)
        os._exit(args.code)
