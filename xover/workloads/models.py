"""Models in plain torch (no torchvision), spanning compute-heavy to communication-heavy.

A model's balance is what matters to xover: convolutions on small feature maps do many FLOPs per
parameter (compute-heavy, little to all-reduce), large fully-connected layers do the opposite.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import TRANSFORMER_DEFAULTS


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet: three stages of basic blocks. Compute-heavy."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 16, blocks_per_stage: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        channels = width
        for stage, out_channels in enumerate((width, 2 * width, 4 * width)):
            for block in range(blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, out_channels, stride))
                channels = out_channels
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class VGGStyle(nn.Module):
    """A few convolutions followed by large fully-connected layers. Communication-heavy."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int, width: int = 16, hidden: int = 1024) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 2 * width * (image_size // 2) ** 2
        self.classifier = nn.Sequential(
            nn.Linear(flat, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class MLP(nn.Module):
    def __init__(self, in_features: int, num_classes: int, hidden: int = 512, layers: int = 2) -> None:
        super().__init__()
        dims = [in_features] + [hidden] * layers
        blocks: list[nn.Module] = []
        for a, b in zip(dims, dims[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(nn.Flatten(), *blocks, nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class TinyTransformerLM(nn.Module):
    """A small decoder-only transformer over a byte/char vocabulary."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int = TRANSFORMER_DEFAULTS["d_model"],
                 heads: int = TRANSFORMER_DEFAULTS["heads"], layers: int = 2) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.register_buffer("causal_mask", torch.triu(torch.full((seq_len, seq_len), -math.inf), 1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.token(tokens) + self.position(torch.arange(n, device=tokens.device))
        x = self.blocks(x, mask=self.causal_mask[:n, :n], is_causal=True)
        return self.head(self.norm(x))
