"""The plugin's extra backbones: raw pixels and ResNet-18 with the CIFAR stem."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solo_diet.core.backbones import PLUGIN_BACKBONES, RawPixels, cifar_resnet18


def test_raw_pixels_is_the_flattened_image_and_checks_its_shape():
    images = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    backbone = PLUGIN_BACKBONES["raw_pixels"]("any_method", size=16, channels=3)
    assert backbone.num_features == 3 * 16 * 16
    assert torch.equal(backbone(images), images.reshape(4, -1))
    channels_last = images.contiguous(memory_format=torch.channels_last)
    assert torch.equal(backbone(channels_last), images.reshape(4, -1))
    assert backbone.state_dict()["input_shape"].tolist() == [3, 16, 16]
    restored = RawPixels(size=16, channels=3)
    restored.load_state_dict(backbone.state_dict(), strict=True)
    with pytest.raises(
        ValueError, match=r"built for images of shape \(3, 16, 16\), got \(3, 32, 32\)"
    ):
        backbone(torch.zeros(1, 3, 32, 32))


def test_cifar_resnet18_keeps_32_px_resolution_in_the_stem():
    torch.manual_seed(0)
    backbone = cifar_resnet18("simclr")
    assert backbone.num_features == 512 and isinstance(backbone.fc, nn.Identity)
    assert isinstance(backbone.maxpool, nn.Identity)
    assert backbone.conv1.kernel_size == (3, 3) and backbone.conv1.stride == (1, 1)
    stem = backbone.relu(backbone.bn1(backbone.conv1(torch.zeros(2, 3, 32, 32))))
    assert stem.shape == (2, 64, 34, 34)  # padding 2, as solo-learn's CIFAR stem
    assert backbone.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 512)
