"""Registry of the built-in models and datasets that recipes name."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Data shapes a model accepts; a recipe pairing a model with a dataset of another kind is rejected.
IMAGE, TOKENS = "image", "tokens"


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset recipes can name: the data it gives (image or tokens), what it is, and its options."""

    kind: str
    description: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class ModelInfo:
    """A model recipes can name: the data it takes (image or tokens), what it is, and its options."""

    kind: str
    description: str
    options: tuple[str, ...]


DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo(IMAGE, "scikit-learn handwritten digits, 1797 real 8x8 images, 10 classes", ("image_size",)),
    "synthetic-images": DatasetInfo(
        IMAGE, "random images and labels, one fixed batch (throughput only)", ("image_size", "channels", "num_classes")
    ),
    "synthetic-tokens": DatasetInfo(
        TOKENS, "random token sequences, one fixed batch (throughput only)", ("seq_len", "vocab_size")
    ),
    "python-chars": DatasetInfo(
        TOKENS, "character-level text of Python's standard library sources", ("seq_len", "max_bytes")
    ),
}

MODELS: dict[str, ModelInfo] = {
    "resnet": ModelInfo(IMAGE, "small CIFAR-style ResNet (compute-heavy)", ("width", "blocks_per_stage")),
    "vgg": ModelInfo(
        IMAGE, "VGG-style net with large fully-connected layers (communication-heavy)", ("width", "hidden")
    ),
    "mlp": ModelInfo(IMAGE, "multi-layer perceptron", ("hidden", "layers")),
    "transformer": ModelInfo(TOKENS, "small decoder-only transformer language model", ("d_model", "heads", "layers")),
    # paper-class models: the originals' parameters, sized for a GPU
    "resnet50": ModelInfo(IMAGE, "ImageNet ResNet-50, 25.6 M parameters (compute-heavy)", ()),
    "vgg16": ModelInfo(IMAGE, "VGG-16, 138 M parameters at 224x224 (communication-heavy)", ()),
    "bert": ModelInfo(
        TOKENS,
        "BERT-base encoder with a masked-LM head, 109.5 M parameters at vocabulary 30522",
        ("d_model", "heads", "layers", "ffn", "max_positions"),
    ),
}


# The transformers' attention splits d_model evenly between the heads; recipes are checked against these.
TRANSFORMER_DEFAULTS = {"d_model": 128, "heads": 4}
BERT_DEFAULTS = {"d_model": 768, "heads": 12, "max_positions": 512}


def build_dataset(name: str, *, batch_size: int, rank: int, world_size: int, seed: int, options: dict[str, Any]):
    """The named dataset, this rank's shard of it, with the recipe's options."""
    from . import datasets

    builders: dict[str, Callable[..., datasets.Dataset]] = {
        "digits": datasets.digits,
        "synthetic-images": datasets.synthetic_images,
        "synthetic-tokens": datasets.synthetic_tokens,
        "python-chars": datasets.python_chars,
    }
    return builders[name](batch_size=batch_size, rank=rank, world_size=world_size, seed=seed, **options)


def build_model(name: str, dataset, options: dict[str, Any]):
    """Build a model shaped for the dataset's inputs (channels, image size, classes, vocabulary)."""
    from . import models

    sample_inputs, _ = dataset.batch(0)
    if MODELS[name].kind == IMAGE:
        channels, size = sample_inputs.shape[1], sample_inputs.shape[-1]
        classes = dataset.classes  # declared by the dataset: every rank builds the same head
        if name == "resnet":
            return models.SmallResNet(channels, classes, **options)
        if name == "vgg":
            return models.VGGStyle(channels, classes, size, **options)
        if name == "resnet50":
            return models.ResNet50(channels, classes, **options)
        if name == "vgg16":
            return models.VGG16(channels, classes, size, **options)
        return models.MLP(channels * size * size, classes, **options)
    if name == "bert":
        return models.Bert(dataset.vocab, sample_inputs.shape[1], **options)
    return models.TinyTransformerLM(dataset.vocab, sample_inputs.shape[1], **options)


DIGITS_TRAIN_ROWS = 1500  # of scikit-learn's 1797 digits; the rest are the test split

# Sources of the standard library that every CPython install carries; a fixed list keeps the corpus
# the same for a given Python version on every machine.
STDLIB_TEXT_FILES = ("argparse.py", "difflib.py", "textwrap.py", "inspect.py", "dataclasses.py", "pathlib.py")
LEAST_CORPUS_BYTES = 10_000  # python-chars' max_bytes: below it, a few windows and no test split worth one
PYTHON_CHARS_TRAIN_SHARE = 0.9  # of its windows; the rest are the test split


def stdlib_corpus(max_bytes: int) -> bytes:
    """Text of the standard library's STDLIB_TEXT_FILES, joined and cut to `max_bytes`; too little of it is
    an error, not a smaller corpus."""
    root = sysconfig.get_paths()["stdlib"]
    chunks = []
    for name in STDLIB_TEXT_FILES:
        path = os.path.join(root, name)
        if os.path.exists(path):
            with open(path, "rb") as handle:
                chunks.append(handle.read())
    corpus = b"\n".join(chunks)[:max_bytes]
    if len(corpus) < min(max_bytes, LEAST_CORPUS_BYTES):
        raise RuntimeError(f"the standard library's sources were not found under {root}")
    return corpus


def python_chars_windows(corpus_bytes: int, seq_len: int) -> tuple[int, int]:
    """(train, test) windows of `seq_len` tokens a python-chars corpus of `corpus_bytes` holds."""
    count = max(0, (corpus_bytes - 1) // seq_len)
    train = int(count * PYTHON_CHARS_TRAIN_SHARE)
    return train, count - train


PYTHON_CHARS_DEFAULTS = {"seq_len": 64, "max_bytes": 400_000}  # its options left out of a recipe (datasets.py)


def train_rows(dataset: str, options: Mapping[str, Any]) -> int | None:
    """Rows (samples) of a dataset's train split, where it is finite; None for one fixed batch of any size.
    Torch-free: recipes are checked against it where they are read."""
    if dataset == "digits":
        return DIGITS_TRAIN_ROWS
    if dataset == "python-chars":
        given = {**PYTHON_CHARS_DEFAULTS, **options}
        return python_chars_windows(len(stdlib_corpus(given["max_bytes"])), given["seq_len"])[0]
    return None
