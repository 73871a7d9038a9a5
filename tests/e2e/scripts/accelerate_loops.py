"""Hugging Face Accelerate training loops as users write them (they know nothing of xover), chosen by flags:
gradient accumulation of any count, dropout, gradient clipping through the accelerator, and after each
epoch an evaluation of one of two kinds - a forward of the prepared model with gradients enabled on the
last training batch, gathered with `accelerator.gather` (accuracy on the training batch: no backward
follows it), or an evaluation loop over held-out data gathered with `gather_for_metrics` (in eval mode,
under no_grad unless --eval-with-grad). Rank 0 prints each optimizer step's loss (the sum of its
micro-batches' losses as backward saw them) with every bit.

    torchrun --standalone --nproc-per-node=2 accelerate_loops.py --accumulate 2 --evaluate train-batch
"""

import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--clip", type=float, default=None, help="accelerator.clip_grad_norm_ at each real step")
parser.add_argument("--evaluate", choices=("none", "train-batch", "loop"), default="none")
parser.add_argument("--eval-with-grad", action="store_true", help="the evaluation loop without no_grad")
args = parser.parse_args()

accelerator = Accelerator(gradient_accumulation_steps=args.accumulate, cpu=True)
set_seed(5)
generator = torch.Generator().manual_seed(1)
x = torch.randn(1536, 32, generator=generator)
y = (x @ torch.randn(32, 10, generator=generator)).argmax(dim=1)
loader = DataLoader(TensorDataset(x[:1024], y[:1024]), batch_size=32, shuffle=True)
held_out = DataLoader(TensorDataset(x[1024:], y[1024:]), batch_size=100)  # 512 rows: an uneven last batch
model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Dropout(args.dropout), nn.Linear(256, 256), nn.GELU(),
                      nn.Linear(256, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.2, total_iters=32)
model, optimizer, loader, held_out, scheduler = accelerator.prepare(model, optimizer, loader, held_out, scheduler)

step, step_loss = 0, 0.0
for epoch in range(args.epochs):
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            if accelerator.sync_gradients and args.clip is not None:
                accelerator.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        step_loss += float(loss.detach() / args.accumulate)  # what backward saw
        if accelerator.sync_gradients:
            accelerator.print(f"step {step} loss {step_loss!r}", flush=True)
            step, step_loss = step + 1, 0.0
    if args.evaluate == "train-batch":
        accuracy = accelerator.gather((model(xb).argmax(1) == yb).float().mean())
        accelerator.print(f"epoch {epoch} train-batch accuracy {accuracy.mean().item()!r}", flush=True)
    elif args.evaluate == "loop":
        model.eval()
        correct = total = 0
        with torch.set_grad_enabled(args.eval_with_grad):
            for xb, yb in held_out:
                predictions, labels = accelerator.gather_for_metrics((model(xb).argmax(1), yb))
                correct += int((predictions == labels).sum())
                total += len(labels)
        model.train()
        accelerator.print(f"epoch {epoch} held-out accuracy {correct}/{total}", flush=True)
accelerator.end_training()
