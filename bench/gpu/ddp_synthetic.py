"""A DistributedDataParallel script as a user would write it for a GPU cluster (it knows nothing of xover):
an MLP on synthetic data, on cuda:LOCAL_RANK (modulo the GPUs this process sees, so that several ranks
may share one GPU), the backend chosen on the command line. The GPU check runs it from a job file
(bench/gpu/recipes/gpu-ddp-script.toml): profiled, planned next to a recipe, run from the plan.

    torchrun --standalone --nproc-per-node=2 bench/gpu/ddp_synthetic.py --steps 50 --backend gloo
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--hidden", type=int, default=4096)
parser.add_argument("--backend", default=None, help="default: nccl on GPUs, gloo on CPUs")
parser.add_argument(
    "--deterministic", action="store_true", help="deterministic kernels (needs CUBLAS_WORKSPACE_CONFIG)"
)
args = parser.parse_args()


def main() -> None:
    cuda = torch.cuda.is_available()
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Linear(1024, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    ).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator(device=device).manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 1024, generator=generator, device=device)
        y = torch.randint(0, 10, (args.batch_size,), generator=generator, device=device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item()!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
