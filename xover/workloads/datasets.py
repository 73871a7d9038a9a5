"""Datasets that need no download: real digits from scikit-learn, real text from Python's own
standard library, and synthetic tensors for throughput work (like Horovod's synthetic benchmark).

Every dataset is sharded by rank and deterministic for a seed: the batch a rank sees at a step
depends only on (seed, step, rank), never on timing, so runs in any mode see the same data.
"""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from . import DIGITS_TRAIN_ROWS, PYTHON_CHARS_DEFAULTS, python_chars_windows, stdlib_corpus


@dataclass
class Split:
    """Inputs and their targets, row for row."""

    inputs: torch.Tensor
    targets: torch.Tensor


class Dataset:
    """A train split served in per-rank batches, and an optional test split for evaluation."""

    task = "classification"  # or "language-model"

    def __init__(
        self,
        train: Split,
        test: Split | None,
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        classes: int | None = None,
        vocab: int | None = None,
    ) -> None:
        self.train, self.test = train, test
        # what the model's head is sized by: declared, never read off the (per-rank) samples
        self.classes, self.vocab = classes, vocab
        self.batch_size, self.rank, self.world_size, self.seed = batch_size, rank, world_size, seed
        self._epoch_order: tuple[int, torch.Tensor] | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Steps that cover the train split once across every rank (at least one)."""
        return max(1, len(self.train.inputs) // (self.batch_size * self.world_size))

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of this rank at a global step: a shuffled epoch order shared by all ranks."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if self._epoch_order is None or self._epoch_order[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._epoch_order = (epoch, torch.randperm(len(self.train.inputs), generator=generator))
        global_batch = self.batch_size * self.world_size
        start = index * global_batch + self.rank * self.batch_size
        rows = self._epoch_order[1][start : start + self.batch_size]
        return self.train.inputs[rows], self.train.targets[rows]

    def test_batches(self, size: int = 512):
        """The test split in batches of `size`, in order; none without one."""
        if self.test is None:
            return
        for start in range(0, len(self.test.inputs), size):
            yield self.test.inputs[start : start + size], self.test.targets[start : start + size]


class SyntheticDataset(Dataset):
    """One fixed random batch per rank, reused every step: measures throughput, not learning."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, **kw) -> None:
        super().__init__(Split(inputs, targets), None, **kw)

    @property
    def steps_per_epoch(self) -> int:
        """As good as endless: one fixed batch has no epochs."""
        return 1_000_000

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The same fixed batch at every step."""
        return self.train.inputs, self.train.targets


def digits(*, batch_size: int, rank: int, world_size: int, seed: int, image_size: int = 8) -> Dataset:
    """scikit-learn's 1797 handwritten 8x8 digits; the last 297 are the test split."""
    pixels, target = digits_arrays()
    images = torch.tensor(pixels, dtype=torch.float32).unsqueeze(1) / 16.0
    if image_size != 8:
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)
    images = (images - 0.5) / 0.5
    labels = torch.tensor(target, dtype=torch.long)
    cut = DIGITS_TRAIN_ROWS
    return Dataset(
        Split(images[:cut], labels[:cut]),
        Split(images[cut:], labels[cut:]),
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=seed,
        classes=10,
    )


def digits_arrays():
    """scikit-learn's digits as (images 1797x8x8, labels), the values its load_digits returns, read from
    the file in its package without importing it: sklearn.datasets brings in SciPy, a large part of a
    rank's start (docs/measurements.md, *make test's time*)."""
    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # finds the package, does not run it
    folders = spec.submodule_search_locations if spec else None
    path = Path(folders[0], "datasets", "data", "digits.csv.gz") if folders else None
    if path is None or not path.is_file():  # another layout: its own loader
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def synthetic_images(
    *,
    batch_size: int,
    rank: int,
    world_size: int,
    seed: int,
    image_size: int = 32,
    channels: int = 3,
    num_classes: int = 10,
) -> Dataset:
    """Random images and labels, one fixed batch per rank (seed and rank decide it)."""
    generator = torch.Generator().manual_seed(seed * 1009 + rank)
    inputs = torch.randn(batch_size, channels, image_size, image_size, generator=generator)
    targets = torch.randint(0, num_classes, (batch_size,), generator=generator)
    return SyntheticDataset(
        inputs, targets, batch_size=batch_size, rank=rank, world_size=world_size, seed=seed, classes=num_classes
    )


def synthetic_tokens(
    *, batch_size: int, rank: int, world_size: int, seed: int, seq_len: int = 64, vocab_size: int = 256
) -> Dataset:
    """Random token sequences for a language model (targets: the next token), one fixed batch per rank."""
    generator = torch.Generator().manual_seed(seed * 1009 + rank)
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator)
    dataset = SyntheticDataset(
        tokens[:, :-1],
        tokens[:, 1:],
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=seed,
        vocab=vocab_size,
    )
    dataset.task = "language-model"
    return dataset


def python_chars(
    *,
    batch_size: int,
    rank: int,
    world_size: int,
    seed: int,
    seq_len: int = PYTHON_CHARS_DEFAULTS["seq_len"],
    max_bytes: int = PYTHON_CHARS_DEFAULTS["max_bytes"],
) -> Dataset:
    """Character-level language modelling on Python's own source code (bytes as tokens)."""
    data = torch.frombuffer(bytearray(stdlib_corpus(max_bytes)), dtype=torch.uint8).long()
    cut, held_out = python_chars_windows(len(data), seq_len)
    count = cut + held_out
    windows = data[: count * seq_len + 1]
    inputs = windows[:-1].view(count, seq_len)
    targets = windows[1:].view(count, seq_len)
    dataset = Dataset(
        Split(inputs[:cut], targets[:cut]),
        Split(inputs[cut:], targets[cut:]),
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=seed,
        vocab=256,
    )
    dataset.task = "language-model"
    return dataset
