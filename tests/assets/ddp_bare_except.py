"""A DDP script that skips a batch that fails, as old scripts do: each step in a bare `except:`, which catches
SystemExit too. At its job's length xover stops the script where the next iteration begins; caught, the script
went on to its own count, a "failed, going on" line a batch."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
steps = parser.parse_args().steps

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
done = 0
for step in range(steps):
    try:
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        done += 1
        print(f"step {step} loss {loss.item()}", flush=True)
    except:  # noqa: E722 - the pattern under test
        print(f"step {step} failed, going on", flush=True)
print(f"finished {done}", flush=True)
dist.destroy_process_group()
