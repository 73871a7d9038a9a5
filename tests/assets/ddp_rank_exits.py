"""A DistributedDataParallel script whose rank 1 dies without a word (os._exit(3)) after its third step: rank 0's
next all-reduce fails with gloo's 'Connection reset by peer', a knock-on. `xover run` blames rank 1, as torchrun's
summary does."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    if step == 2 and dist.get_rank() == 1:
        os._exit(3)
