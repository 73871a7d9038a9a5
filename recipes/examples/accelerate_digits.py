"""A Hugging Face Accelerate training script, written the way Accelerate's examples are - it knows nothing
of xover: `Accelerator(gradient_accumulation_steps=2)`, `prepare(model, optimizer, loader, scheduler)`,
`accelerator.accumulate(model)`, `accelerator.backward` and `accelerator.gather`. Rank 0 prints each
optimizer step's loss (the sum of its micro-batches' losses as backward saw them: Accelerate divides
each by the accumulation) with every bit, and the loss averaged over the ranks.

    torchrun --standalone --nproc-per-node=2 recipes/examples/accelerate_digits.py --steps 100
    xover run --script recipes/examples/accelerate_digits.py -- --steps 100
"""

import argparse
import importlib.util
import os
import types

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def load_digits():
    """scikit-learn's digits as its load_digits returns them, read from the CSV file in its package: importing
    sklearn.datasets brings in SciPy, about a CPU-second of every rank's start."""
    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return types.SimpleNamespace(images=table[:, :-1].reshape(-1, 8, 8), target=table[:, -1].astype(int))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100, help="optimizer steps (the data is repeated in epochs)")
parser.add_argument("--accumulate", type=int, default=2, help="micro-batches per optimizer step")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()


def main() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=args.accumulate, cpu=not torch.cuda.is_available())
    set_seed(args.seed)
    torch.set_num_threads(1)

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).reshape(-1, 64) / 16.0
    dataset = TensorDataset(images, torch.tensor(digits.target))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = nn.Sequential(
        nn.Linear(64, args.hidden),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    accelerator.print(f"parameter bytes {sum(p.numel() * p.element_size() for p in model.parameters())}")
    step, step_loss, mean_loss = 0, 0.0, 0.0
    while step < args.steps:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            step_loss += float(loss.detach() / accelerator.gradient_accumulation_steps)  # what backward saw
            mean_loss += accelerator.gather(loss.detach()).mean().item() / accelerator.gradient_accumulation_steps
            if not accelerator.sync_gradients:
                continue
            # repr: every bit of the float
            accelerator.print(f"step {step} loss {step_loss!r} mean over ranks {mean_loss!r}", flush=True)
            step, step_loss, mean_loss = step + 1, 0.0, 0.0
            if step == args.steps:
                break
    accelerator.end_training()


if __name__ == "__main__":
    main()
