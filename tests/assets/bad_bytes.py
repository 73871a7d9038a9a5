"""Prints bytes that are not UTF-8 (as a buggy progress bar or a binary dump might) after each of its few
training steps (a script xover runs must train through hvd.DistributedOptimizer), then exits."""
import sys

import horovod.torch as hvd
import torch

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    sys.stdout.buffer.write(b"step %d \xff\xfe\x80 garbage\n" % step)
    sys.stdout.flush()
sys.stdout.buffer.write(b"no newline at the end \xc3")
sys.stdout.flush()
