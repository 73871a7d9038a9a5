"""A plain DistributedDataParallel training script, written the way PyTorch's examples are - it knows
nothing of xover.

    torchrun --standalone --nproc-per-node=2 recipes/examples/ddp_digits.py --steps 100
    xover run --script recipes/examples/ddp_digits.py --script recipes/examples/ddp_digits.py -- --steps 100

Options that exercise the corners of DDP:
  --frozen      a frozen input layer (requires_grad=False) and a head that forward never uses, so DDP
                needs find_unused_parameters=True
  --batchnorm   BatchNorm layers: buffers that DDP broadcasts from rank 0 before every forward
  --accumulate  N micro-batches per optimizer step, the first N-1 inside ddp.no_sync()
  --average-loss  log the loss averaged over the ranks (a dist.all_reduce in the training loop)
  --swa         stochastic weight averaging: an AveragedModel (a deep copy of the DDP model) updated after
                every step of the second half, its BatchNorm statistics recomputed over the data at the end
                (forwards with no backward), and its loss printed
  --keep-best   rank 0 alone keeps a deep copy of the DDP model at its lowest logged loss (best-model
                tracking), never forwarded; the loss it was kept at is printed at the end
  --clip-by-hand MAX  the gradients' norm computed from each .grad after backward, and the gradients
                scaled down to MAX by hand before the step (as scripts did before clip_grad_norm_)
  --center      the inputs centred on a running mean kept in a buffer and updated through .data (as
                older EMA code writes it): DDP broadcasts rank 0's before every forward
  --probe       a linear probe on the inputs, fitted on each rank by its own optimizer after every step
                (no DDP: a local model beside the trained one); its last loss is printed
"""

import argparse
import contextlib
import copy
import importlib.util
import os
import types

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def load_digits():
    """scikit-learn's digits as its load_digits returns them, read from the CSV file in its package: importing
    sklearn.datasets brings in SciPy, about a CPU-second of every rank's start."""
    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return types.SimpleNamespace(images=table[:, :-1].reshape(-1, 8, 8), target=table[:, -1].astype(int))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100, help="optimizer steps (the data is repeated in epochs)")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--frozen", action="store_true")
parser.add_argument("--batchnorm", action="store_true")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--average-loss", action="store_true")
parser.add_argument("--swa", action="store_true")
parser.add_argument("--keep-best", action="store_true")
parser.add_argument("--clip-by-hand", type=float, default=None)
parser.add_argument("--center", action="store_true")
parser.add_argument("--probe", action="store_true")
args = parser.parse_args()


class Net(nn.Module):
    def __init__(self, hidden: int, frozen: bool, batchnorm: bool, center: bool) -> None:
        super().__init__()
        self.frozen = frozen
        self.centered = center
        if center:
            self.register_buffer("center", torch.zeros(64))
        if frozen:
            self.projection = nn.Linear(64, 64)  # a fixed random projection: never trained
            self.projection.requires_grad_(False)
            self.auxiliary_head = nn.Linear(hidden, 10)  # defined, never used in forward
        norm = (lambda: nn.BatchNorm1d(hidden)) if batchnorm else nn.Identity
        self.body = nn.Sequential(
            nn.Linear(64, hidden), norm(), nn.ReLU(), nn.Linear(hidden, hidden), norm(), nn.ReLU()
        )
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.centered:
            if self.training:
                self.center.data.mul_(0.9).add_(0.1 * x.mean(dim=0))
            x = x - self.center
        if self.frozen:
            x = torch.tanh(self.projection(x))
        return self.head(self.body(x))


def main() -> None:
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).reshape(-1, 64) / 16.0
    dataset = TensorDataset(images, torch.tensor(digits.target))
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    model = Net(args.hidden, args.frozen, args.batchnorm, args.center).to(device)
    model = DDP(model, device_ids=[local_rank] if use_cuda else None, find_unused_parameters=args.frozen)
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=args.lr * world_size, momentum=0.9
    )
    averaged = AveragedModel(model) if args.swa else None
    probe = nn.Linear(64, 10).to(device) if args.probe else None
    probe_optimizer = torch.optim.SGD(probe.parameters(), lr=0.1) if probe is not None else None
    best, best_loss = None, float("inf")

    step, micro_batch, epoch = 0, 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            last = (micro_batch + 1) % args.accumulate == 0
            # gradients are averaged across ranks only on the last micro-batch of a step
            with contextlib.nullcontext() if last else model.no_sync():
                loss = F.cross_entropy(model(x), y) / args.accumulate
                loss.backward()
            micro_batch += 1
            if not last:
                continue
            if args.clip_by_hand is not None:
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                norm = torch.sqrt(sum((g.detach() ** 2).sum() for g in grads))
                if norm > args.clip_by_hand:
                    for g in grads:
                        g.mul_(args.clip_by_hand / norm)
            optimizer.step()
            optimizer.zero_grad()
            if probe is not None:
                probe_loss = F.cross_entropy(probe(x), y)
                probe_optimizer.zero_grad()
                probe_loss.backward()
                probe_optimizer.step()
            if averaged is not None and step >= args.steps // 2:
                averaged.update_parameters(model)
            if step % args.log_every == 0:
                logged = loss.detach().clone()
                if args.average_loss:
                    dist.all_reduce(logged)
                    logged /= world_size
                if rank == 0:
                    print(f"step {step} loss {logged.item()!r}", flush=True)  # repr: every bit of the float
                    if args.keep_best and logged.item() < best_loss:
                        best, best_loss = copy.deepcopy(model), logged.item()
            step += 1
            if step == args.steps:
                break
        epoch += 1

    if rank == 0:
        print(f"final loss {loss.item()!r}", flush=True)
    if averaged is not None:
        update_bn(loader, averaged, device=device)
        with torch.no_grad():
            averaged_loss = F.cross_entropy(averaged(x), y)
        if rank == 0:
            print(f"averaged loss {averaged_loss.item()!r}", flush=True)
    if best is not None:
        print(f"best loss {best_loss!r}", flush=True)
    if probe is not None and rank == 0:
        print(f"probe loss {probe_loss.item()!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
