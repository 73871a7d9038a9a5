"""A script that trains with the Hugging Face `transformers` Trainer (it knows nothing of xover): a model
built here (nothing downloaded), gradient accumulation (2 unless --accumulate), gradient clipping, on
sklearn's digits; with --eval-every N an evaluation on held-out digits every N steps (the Trainer's own
loop: eval mode, no gradients, gathered across ranks). After every optimizer step rank 0 prints a checksum
of the weights with every bit.

    torchrun --standalone --nproc-per-node=2 hf_trainer_digits.py --steps 8
"""

import argparse
import importlib.util
import os
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments


def load_digits():
    """scikit-learn's digits as its load_digits returns them, read from the CSV file in its package: importing
    sklearn.datasets brings in SciPy, about a CPU-second of every rank's start."""
    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return types.SimpleNamespace(images=table[:, :-1].reshape(-1, 8, 8), target=table[:, -1].astype(int))


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--output-dir", default="hf-trainer-output")
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: never)")
args = parser.parse_args()


class Digits(torch.utils.data.Dataset):
    def __init__(self, rows: slice = slice(None)) -> None:
        digits = load_digits()
        self.images = torch.tensor(digits.images[rows], dtype=torch.float32).reshape(-1, 64) / 16.0
        self.labels = torch.tensor(digits.target[rows])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"inputs": self.images[index], "labels": self.labels[index]}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10))

    def forward(self, inputs, labels=None):
        logits = self.net(inputs)
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


class PrintWeights(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero:
            checksum = float(sum(p.double().sum() for p in model.parameters()))
            print(f"step {state.global_step - 1} weights {checksum!r}", flush=True)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if state.is_world_process_zero:
            print(f"step {state.global_step - 1} eval loss {metrics['eval_loss']!r}", flush=True)


torch.set_num_threads(1)
torch.manual_seed(42)  # the model is built before the Trainer seeds
model = Net()
print(f"parameter bytes {sum(p.numel() * p.element_size() for p in model.parameters())}", flush=True)
training = TrainingArguments(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=32,
                             gradient_accumulation_steps=args.accumulate, learning_rate=2e-3, max_grad_norm=1.0,
                             seed=42, use_cpu=not torch.cuda.is_available(), report_to=[], save_strategy="no",
                             disable_tqdm=True, eval_strategy="steps" if args.eval_every else "no",
                             eval_steps=args.eval_every or None, per_device_eval_batch_size=50)
Trainer(model=model, args=training, train_dataset=Digits(slice(0, 1500)) if args.eval_every else Digits(),
        eval_dataset=Digits(slice(1500, None)) if args.eval_every else None, callbacks=[PrintWeights()]).train()
