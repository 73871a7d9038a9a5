"""A plain Horovod script with a frozen parameter and one the forward never uses."""
import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
hvd.init()
torch.manual_seed(5)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(32, 64)
        self.frozen.requires_grad_(False)
        self.body = nn.Linear(64, 10)
        self.unused = nn.Linear(64, 10)  # never called: its gradient stays None

    def forward(self, x):
        return self.body(torch.relu(self.frozen(x)))


model = Net()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1),
                                     named_parameters=[(n, p) for n, p in model.named_parameters() if p.requires_grad])
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
generator = torch.Generator().manual_seed(7 + hvd.rank())
for step in range(args.steps):
    x, y = torch.randn(16, 32, generator=generator), torch.randint(0, 10, (16,), generator=generator)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if hvd.rank() == 0:
        print(f"step {step} loss {loss.item():.8f}", flush=True)
