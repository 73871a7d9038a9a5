"""Registry of the built-in models and datasets that recipes name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# Data shapes a model accepts; a recipe pairing a model with a dataset of another kind is rejected.
IMAGE, TOKENS = "image", "tokens"


@dataclass(frozen=True)
class DatasetInfo:
    kind: str
    description: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class ModelInfo:
    kind: str
    description: str
    options: tuple[str, ...]


DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo(IMAGE, "scikit-learn handwritten digits, 1797 real 8x8 images, 10 classes", ("image_size",)),
    "synthetic-images": DatasetInfo(IMAGE, "random images and labels, one fixed batch (throughput only)",
                                    ("image_size", "channels", "num_classes")),
    "synthetic-tokens": DatasetInfo(TOKENS, "random token sequences, one fixed batch (throughput only)",
                                    ("seq_len", "vocab_size")),
    "python-chars": DatasetInfo(TOKENS, "character-level text of Python's standard library sources",
                                ("seq_len", "max_bytes")),
}

MODELS: dict[str, ModelInfo] = {
    "resnet": ModelInfo(IMAGE, "small CIFAR-style ResNet (compute-heavy)", ("width", "blocks_per_stage")),
    "vgg": ModelInfo(IMAGE, "VGG-style net with large fully-connected layers (communication-heavy)", ("width", "hidden")),
    "mlp": ModelInfo(IMAGE, "multi-layer perceptron", ("hidden", "layers")),
    "transformer": ModelInfo(TOKENS, "small decoder-only transformer language model", ("d_model", "heads", "layers")),
}


# The transformer's attention splits d_model evenly between its heads; recipes are checked against these.
TRANSFORMER_DEFAULTS = {"d_model": 128, "heads": 4}


def build_dataset(name: str, *, batch_size: int, rank: int, world_size: int, seed: int, options: dict[str, Any]):
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
        return models.MLP(channels * size * size, classes, **options)
    return models.TinyTransformerLM(dataset.vocab, sample_inputs.shape[1], **options)
