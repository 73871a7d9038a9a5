"""A PyTorch Lightning training script, written the way Lightning's examples are - it knows nothing of
xover: a `LightningModule` with Adam and a StepLR schedule, a `DataLoader`, and
`Trainer(strategy="ddp", accumulate_grad_batches=2)`. Rank 0 prints each optimizer step's loss (the sum
of its micro-batches' losses as backward saw them: Lightning divides each by the accumulation) with
every bit.

    torchrun --standalone --nproc-per-node=2 recipes/examples/lightning_digits.py --steps 100
    xover run --script recipes/examples/lightning_digits.py -- --steps 100
"""

import argparse
import importlib.util
import os
import types

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
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


class DigitsClassifier(pl.LightningModule):
    def __init__(self, hidden: int, lr: float, accumulate: int) -> None:
        super().__init__()
        self.lr, self.accumulate = lr, accumulate
        self.net = nn.Sequential(
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 10),
        )
        self.step_loss = 0.0

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.step_loss += float((loss / self.accumulate).detach())  # what backward sees
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.global_rank == 0:
            print(f"step {self.global_step} loss {self.step_loss!r}", flush=True)  # repr: every bit of the float
        self.step_loss = 0.0

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main() -> None:
    pl.seed_everything(args.seed, verbose=False)
    torch.set_num_threads(1)
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).reshape(-1, 64) / 16.0
    loader = DataLoader(
        TensorDataset(images, torch.tensor(digits.target)), batch_size=args.batch_size, shuffle=True, drop_last=True
    )
    model = DigitsClassifier(args.hidden, args.lr, args.accumulate)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"parameter bytes {sum(p.numel() * p.element_size() for p in model.parameters())}", flush=True)
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's ranks on this node
    nodes = int(os.environ.get("WORLD_SIZE", "1")) // per_node
    trainer = pl.Trainer(
        accelerator="auto",
        devices=per_node,
        num_nodes=nodes,
        strategy="ddp",
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, loader)


if __name__ == "__main__":
    main()
