"""A plain Horovod script that hangs in its forward pass (holding its crossover turn) at step 3."""
import time

import horovod.torch as hvd
import torch
from torch import nn

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)


class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 4:
            time.sleep(3600)  # a deadlock in user code
        return self.layer(x)


model = Stuck()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
for _ in range(100):
    optimizer.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    optimizer.step()
