"""A DDP script whose tracker, in a reference cycle, finishes in its finalizer, as a metrics or checkpoint helper may:
it meets its peers at a barrier and writes a summary to the log the script left open. Python's exit collects the
cycle with the process group alive and the log still open; xover's end once closed the files and destroyed the
group first (the summary lost, the barrier skipped)."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--log-file", required=True)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
log = open(f"{args.log_file}.rank{rank}", "w")  # noqa: SIM115 - never closed, as scripts leave them
model = DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


class Tracker:
    def __init__(self) -> None:
        self.itself = self  # the cycle: only the collector finalizes it

    def __del__(self) -> None:
        met = "no process group"
        if dist.is_initialized():
            dist.barrier()
            met = "met at a barrier"
        log.write(f"summary: {met}\n")


for step in range(args.steps):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    log.write(f"step {step} loss {loss.item():.6f}\n")
Tracker()
