"""Trains one step (a script xover runs must train through hvd.DistributedOptimizer), starts a process in a
session of its own (which no launcher stops), then exits at once."""
import subprocess

import horovod.torch as hvd
import torch

hvd.init()
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
model(torch.randn(8, 4)).sum().backward()
optimizer.step()
subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
