"""Backbones the plugin adds to ``BaseMethod._BACKBONES`` (torch-only): factories of modules with
``num_features``, named not ``resnet*`` (solo-learn's ResNet surgery)."""

from __future__ import annotations

import torch
from torch import nn

from solo_diet.core.errors import Argument, ArgumentError


def _conv3x3(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1)


class _ResidualBlock(nn.Module):
    """Pre-activation block ``LReLU, conv, LReLU, conv`` (+ AvgPool2) with an identity shortcut."""

    def __init__(self, width: int, downsample: bool, slope: float):
        super().__init__()
        self.body = nn.Sequential(
            nn.LeakyReLU(slope), _conv3x3(width, width), nn.LeakyReLU(slope), _conv3x3(width, width)
        )
        self.pool = nn.AvgPool2d(2) if downsample else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(x) + x)


class ResNet8(nn.Module):
    """ResNet-8 of CPLearn (paper Table 5), ``width`` channels, LeakyReLU(0.2), no BN."""

    def __init__(self, width: int = 128, in_channels: int = 3, slope: float = 0.2):
        super().__init__()
        if width <= 0:
            raise ArgumentError(
                Argument("width"), f" must be a positive channel count, got {width}."
            )
        self.num_features = width
        self.stem = nn.Sequential(
            _conv3x3(in_channels, width),
            nn.LeakyReLU(slope),
            _conv3x3(width, width),
            nn.AvgPool2d(2),
        )
        self.stem_shortcut = nn.Sequential(nn.AvgPool2d(2), nn.Conv2d(in_channels, width, 1))
        self.blocks = nn.Sequential(*(_ResidualBlock(width, i == 0, slope) for i in range(3)))
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x) + self.stem_shortcut(x)
        return torch.flatten(self.pool(self.blocks(x)), 1)


def cp_resnet8(method: str, width: int = 128, **kwargs) -> ResNet8:
    """solo-learn backbone factory for :class:`ResNet8` (``backbone.name: cp_resnet8``)."""
    return ResNet8(width=width, **kwargs)


class RawPixels(nn.Module):
    """The input image flattened (``channels * size * size`` features)."""

    def __init__(self, size: int = 32, channels: int = 3):
        super().__init__()
        if size <= 0 or channels <= 0:
            raise ValueError(f"raw_pixels needs positive size and channels, got {size}, {channels}")
        self.shape = (channels, size, size)
        self.register_buffer("input_shape", torch.tensor(self.shape))
        self.num_features = channels * size * size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) != self.shape:
            raise ValueError(
                f"raw_pixels was built for images of shape {self.shape}, got {tuple(x.shape[1:])}"
            )
        return x.flatten(1)


def raw_pixels(method: str, size: int = 32, channels: int = 3) -> RawPixels:
    """solo-learn backbone factory for :class:`RawPixels` (``backbone.name: raw_pixels``)."""
    return RawPixels(size=size, channels=channels)


def cifar_resnet18(method: str, **kwargs) -> nn.Module:
    """torchvision's ResNet-18 with solo-learn's CIFAR stem and no ``fc``."""
    from torchvision.models import resnet18

    network = resnet18(**kwargs)
    network.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
    network.maxpool = nn.Identity()
    network.fc = nn.Identity()
    network.num_features = network.inplanes
    return network


PLUGIN_BACKBONES = {
    "cp_resnet8": cp_resnet8,
    "raw_pixels": raw_pixels,
    "cifar_resnet18": cifar_resnet18,
}
