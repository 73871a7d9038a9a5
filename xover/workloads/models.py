"""Models in plain torch (no torchvision), spanning compute-heavy to communication-heavy.

A model's balance is what matters to xover: convolutions on small feature maps do many FLOPs per
parameter (compute-heavy, little to all-reduce), large fully-connected layers do the opposite.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import BERT_DEFAULTS, TRANSFORMER_DEFAULTS


def shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """A residual block's identity path, projected where the block changes the shape."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual path: the SmallResNet's block."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = shortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: both convolutions plus the shortcut, through a ReLU."""
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
        """Class logits for a batch of images."""
        x = self.stages(self.stem(x))
        return self.head(x.mean((2, 3)))  # not adaptive_avg_pool2d: no deterministic CUDA backward


class VGGStyle(nn.Module):
    """A few convolutions followed by large fully-connected layers. Communication-heavy."""

    def __init__(
        self, in_channels: int, num_classes: int, image_size: int, width: int = 16, hidden: int = 1024
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 2 * width * (image_size // 2) ** 2
        self.classifier = nn.Sequential(
            nn.Linear(flat, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        return self.classifier(torch.flatten(self.features(x), 1))


class MLP(nn.Module):
    """Fully-connected layers with ReLU over flattened inputs: almost no compute per parameter."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 512, layers: int = 2) -> None:
        super().__init__()
        dims = [in_features] + [hidden] * layers
        blocks: list[nn.Module] = []
        for a, b in zip(dims, dims[1:]):
            blocks += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(nn.Flatten(), *blocks, nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of inputs."""
        return self.body(x)


class TinyTransformerLM(nn.Module):
    """A small decoder-only transformer over a byte/char vocabulary."""

    causal_mask: torch.Tensor  # a buffer (register_buffer below)

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        d_model: int = TRANSFORMER_DEFAULTS["d_model"],
        heads: int = TRANSFORMER_DEFAULTS["heads"],
        layers: int = 2,
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.register_buffer("causal_mask", torch.triu(torch.full((seq_len, seq_len), -math.inf), 1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position, each seeing only the tokens before it."""
        n = tokens.shape[1]
        x = self.token(tokens) + self.position(torch.arange(n, device=tokens.device))
        x = self.blocks(x, mask=self.causal_mask[:n, :n], is_causal=True)
        return self.head(self.norm(x))


# The paper-class models below leave out ops whose CUDA backward is non-deterministic
# (adaptive pooling, fused attention) and dropout, so that losses compare exactly between runs
# under torch.use_deterministic_algorithms(True); their parameters are those of the originals.


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (as torchvision): the stride sits on the 3x3 convolution."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.shortcut = shortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: 1x1, 3x3 and 1x1 convolutions plus the shortcut, through a ReLU."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + self.shortcut(x))


class ResNet50(nn.Module):
    """The ImageNet ResNet-50 (25.6 M parameters at 1000 classes). Compute-heavy."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks: list[nn.Module] = []
        channels = 64
        for stage, (width, count) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            for block in range(count):
                blocks.append(Bottleneck(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = width * Bottleneck.expansion
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, num_classes)
        for module in self.modules():  # torchvision's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        # mean, not adaptive_avg_pool2d: the latter's CUDA backward has no deterministic kernel
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG16(nn.Module):
    """VGG-16 (configuration D, 138 M parameters at 224x224 and 1000 classes). Communication-heavy."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int) -> None:
        super().__init__()
        if image_size < 32:
            raise ValueError(f"vgg16 halves the image five times: it needs at least 32x32, got {image_size}")
        layers: list[nn.Module] = []
        channels = in_channels
        for item in VGG16_LAYERS:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.ReLU()]
                channels = int(item)
        self.features = nn.Sequential(*layers)
        # Flat size from the image size (7x7 at 224), not adaptive pooling (non-deterministic on CUDA).
        # Dropout is left out so that losses compare exactly between runs; the parameters are unchanged.
        flat = 512 * (image_size // 32) ** 2
        self.classifier = nn.Sequential(
            nn.Linear(flat, 4096),
            nn.ReLU(),
            nn.Linear(4096, 4096),
            nn.ReLU(),
            nn.Linear(4096, num_classes),
        )
        for module in self.modules():  # torchvision's initialisation
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:  # every conv here has one
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        return self.classifier(torch.flatten(self.features(x), 1))


class SelfAttention(nn.Module):
    """Bidirectional multi-head attention written out: the fused kernels' CUDA backward is non-deterministic."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(d_model, d_model) for _ in range(3))
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every position attending to every other, heads concatenated and projected."""
        b, n, d = x.shape
        q, k, v = (
            layer(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
            for layer in (self.query, self.key, self.value)
        )
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1)
        return self.output((weights @ v).transpose(1, 2).reshape(b, n, d))


class BertLayer(nn.Module):
    """Post-LayerNorm encoder layer, as BERT."""

    def __init__(self, d_model: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = SelfAttention(d_model, heads)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model))
        self.norm2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention, then the feed-forward block, each added back and normalised."""
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn(x))


class Bert(nn.Module):
    """A BERT encoder with its masked-LM head (BERT-base by default, 109.5 M parameters at vocabulary
    30522); no pooler, nothing reads it. Dropout is left out so that losses compare exactly between runs."""

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        d_model: int = BERT_DEFAULTS["d_model"],
        heads: int = BERT_DEFAULTS["heads"],
        layers: int = 12,
        ffn: int = 3072,
        max_positions: int = BERT_DEFAULTS["max_positions"],
    ) -> None:
        super().__init__()
        if seq_len > max_positions:
            raise ValueError(f"bert: sequences of {seq_len} tokens exceed max_positions ({max_positions})")
        self.word = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_positions, d_model)
        self.token_type = nn.Embedding(2, d_model)
        self.embedding_norm = nn.LayerNorm(d_model, eps=1e-12)
        self.blocks = nn.Sequential(*(BertLayer(d_model, heads, ffn) for _ in range(layers)))
        self.transform = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model, eps=1e-12))
        self.decoder_bias = nn.Parameter(torch.zeros(vocab_size))  # the decoder's weights are self.word's
        for module in self.modules():  # BERT's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0, 0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Masked-LM logits over the vocabulary at every position (decoder tied to the word embedding)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word(tokens) + self.position(positions) + self.token_type(torch.zeros_like(tokens))
        x = self.blocks(self.embedding_norm(x))
        return nn.functional.linear(self.transform(x), self.word.weight, self.decoder_bias)
