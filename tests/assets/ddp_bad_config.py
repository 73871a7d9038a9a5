"""Stops on a bad setting before training, as scripts do: SystemExit's message on stderr, exit code 1."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(8, 1))
if dist.get_rank() == 1:
    raise SystemExit("bad config: --lr must be positive, got -1")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(20):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
