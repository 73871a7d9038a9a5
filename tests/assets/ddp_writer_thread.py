"""A DDP script whose steps' lines are written by a thread of its own (not a daemon), stopped after its loop: the
usual shape of a metrics or checkpoint writer. Stopped at its job's length, the code that stops the thread never
runs: its rank must end all the same."""

import argparse
import queue
import threading

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
lines: queue.Queue = queue.Queue()


def writer() -> None:
    while (line := lines.get()) is not None:
        print(line, flush=True)


thread = threading.Thread(target=writer, name="writer")
thread.start()
for step in range(steps):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    lines.put(f"step {step} loss {loss.item()}")
lines.put(None)  # never reached at the job's length
thread.join()
dist.destroy_process_group()
