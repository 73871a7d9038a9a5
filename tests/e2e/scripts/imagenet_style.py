"""What an ImageNet-style training script is made of, as users write it (it knows nothing of xover): a
Dataset that applies a pipeline of `nn.Module` transforms in `__getitem__` (a random crop, a random flip
and a normalisation with its statistics as buffers, as torchvision's transforms are modules), read by a
DataLoader with or without worker processes, and a small convolutional network with batch norm."""

import importlib.util
import os
import types

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset


def load_digits():
    """scikit-learn's digits as its load_digits returns them, read from the CSV file in its package: importing
    sklearn.datasets brings in SciPy, about a CPU-second of every rank's start."""
    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return types.SimpleNamespace(images=table[:, :-1].reshape(-1, 8, 8), target=table[:, -1].astype(int))


class RandomCrop(nn.Module):
    """A random square crop, drawn from torch's global generator (seeded per worker by the DataLoader)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        top, left = (int(torch.randint(0, image.shape[-1] - self.size + 1, ())) for _ in range(2))
        return image[..., top : top + self.size, left : left + self.size]


class RandomFlip(nn.Module):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image.flip(-1) if torch.rand(()) < 0.5 else image


class Normalize(nn.Module):
    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(-1, 1, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return (image - self.mean) / self.std


class Digits(Dataset):
    """sklearn's digits as 3-channel 16x16 images, transformed on every read."""

    def __init__(self, count: int, transform: nn.Module) -> None:
        digits = load_digits()
        images = torch.tensor(digits.images[:count], dtype=torch.float32).unsqueeze(1) / 16.0
        self.images = nn.functional.interpolate(images, size=16).expand(-1, 3, -1, -1).contiguous()
        self.labels = torch.tensor(digits.target[:count])
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.transform(self.images[index]), self.labels[index]


def transforms() -> nn.Module:
    return nn.Sequential(RandomCrop(12), RandomFlip(), Normalize([0.3, 0.3, 0.3], [0.4, 0.4, 0.4]))


def network() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    )
