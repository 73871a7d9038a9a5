"""A DistributedDataParallel script that logs as many do (it knows nothing of xover): after each optimizer step
its ranks gather their losses (all_gather_object), rank 0 broadcasts the mean it logs (broadcast_object_list),
and every few steps the loss is reduced to rank 0 and the ranks meet at a barrier. With --late-ms, rank 1 writes
its own log line first, as slow as a shared file system's, so rank 0 waits that long in the gather: time that
is communication (the device idles while the ranks meet), never compute; every other step rank 1 is late
before an asynchronous all-reduce of the loss that the ranks wait for instead, each time another way a script
waits for one (WAITS: `work.wait()`, `work.get_future().wait()`, a Future chained with `.then()`,
`torch.futures.wait_all` and `torch.futures.collect_all(...).wait()` over it and a second one). Rank 0 prints
each step's loss. With --log-file, each rank writes its lines to a file it never closes (Python's exit writes
them out); with --rendezvous-file, the ranks meet through a `file://` rendezvous (torch removes the file as
its last rank exits, once the collector has freed the model, which a reference cycle holds).

    torchrun --standalone --nproc-per-node=2 ddp_logged_metrics.py --steps 12 --late-ms 60
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--late-ms", type=float, default=0.0)
parser.add_argument("--log-file", default="")
parser.add_argument("--rendezvous-file", default="")
args = parser.parse_args()
# how the asynchronous all-reduce is waited for at even steps, in turn (steps 0 and 10: work.wait(); odd steps too)
WAITS = ("work", "future", "then", "wait_all", "collect_all")


def main() -> None:
    if args.rendezvous_file:
        dist.init_process_group("gloo", init_method=f"file://{args.rendezvous_file}",
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    log = open(f"{args.log_file}.rank{rank}", "w") if args.log_file else None  # noqa: SIM115 - never closed
    torch.manual_seed(3)
    torch.set_num_threads(1)
    features = torch.randn(64 * world_size, 32)
    labels = (features[:, :4].sum(1) > 0).long()
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    trainer = {"model": model}
    trainer["self"] = trainer  # a reference cycle that holds the model (and its process group) past main()
    for step in range(args.steps):
        rows = slice((step * world_size + rank) * 16 % len(features), None)
        x, y = features[rows][:16], labels[rows][:16]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 1 and args.late_ms and step % 2 == 0:
            time.sleep(args.late_ms / 1000)
        total = loss.detach().clone()
        work = dist.all_reduce(total, async_op=True)
        wait = WAITS[step // 2 % len(WAITS)] if step % 2 == 0 else "work"
        if wait == "work":
            work.wait()
        elif wait == "future":  # the Future of it, as a script that chains its work with others' does
            work.get_future().wait()
        elif wait == "then":  # a value made of the reduced one when it arrives
            total = work.get_future().then(lambda future: future.value()[0] / world_size).wait()
        else:  # with a second collective's, as a script that logs a sample count too
            count = torch.tensor([float(len(x))])
            futures = [work.get_future(), dist.all_reduce(count, async_op=True).get_future()]
            if wait == "wait_all":
                torch.futures.wait_all(futures)
            else:
                torch.futures.collect_all(futures).wait()
        if rank == 1 and args.late_ms and step % 2 == 1:
            time.sleep(args.late_ms / 1000)
        gathered = [None] * world_size
        dist.all_gather_object(gathered, loss.item())
        mean = [sum(gathered) / world_size] if rank == 0 else [None]
        dist.broadcast_object_list(mean, src=0)
        if step % 4 == 3:
            total = loss.detach().clone()
            dist.reduce(total, dst=0)
            dist.barrier()
        if rank == 0:
            print(f"step {step} loss {loss.item():.17g} mean {mean[0]:.17g}", flush=True)
        if log is not None:
            log.write(f"step {step} loss {loss.item():.17g} total {total.item():.17g}\n")
    if not args.rendezvous_file:  # one that never does: Python's exit destroys its process group
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
