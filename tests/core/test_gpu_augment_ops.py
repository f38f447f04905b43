"""Parity of the batched augmentation ops with torchvision's functional ops (and PIL's, which
solo-learn's pipeline uses) on the same images with the same parameters.

Tolerances (0..1 scale unless said otherwise; docs/gpu-augmentations.md explains each):
* identical math (resampling, hue, blur, solarize, equalize, normalise, erase): 1e-5 or exact;
* brightness/contrast/saturation/grayscale: 2e-4, our luma weights are PIL's 0.299/0.587/0.114
  where torchvision's tensor ops use 0.2989;
* against PIL on uint8 photos (solo-learn's actual pipeline): PIL rounds to uint8 between passes and
  ops, so a mean and a max difference in 0..255 levels, bounds above the values measured.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image, ImageOps
from torchvision.transforms import InterpolationMode

from solo_diet.core.data import augment as ops

BICUBIC, BILINEAR = InterpolationMode.BICUBIC, InterpolationMode.BILINEAR


def random_images(shape, seed=0) -> torch.Tensor:
    return torch.randint(
        0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


@pytest.fixture(scope="module")
def photos() -> list:
    """scikit-learn's two sample photos (427 x 640) and 32/96 px downscales of them."""
    from sklearn.datasets import load_sample_images

    full = [Image.fromarray(image) for image in load_sample_images().images]
    return full + [image.resize((size, size), Image.BICUBIC) for image in full for size in (32, 96)]


def as_tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].contiguous()


def levels(ours: torch.Tensor, reference: Image.Image) -> torch.Tensor:
    """|ours - reference| in 0..255 levels."""
    return (ours * 255 - as_tensor(reference).float()).abs()


BOXES = [  # (top, left, height, width, flip) on 37 x 53 images: whole, inner, tiny, edge
    (0, 0, 37, 53, False),
    (3, 7, 20, 30, True),
    (5, 2, 8, 9, False),
    (10, 20, 27, 33, True),
]


@pytest.mark.parametrize("size", [(32, 32), (16, 24), (64, 40)])
@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
def test_resized_crop_matches_torchvision(size, interpolation):
    images = random_images((4, 3, 37, 53))
    x = images.float() / 255
    top, left, height, width, flip = (torch.tensor(column) for column in zip(*BOXES))
    ours = ops.resized_crop(x, top, left, height, width, size, flip, interpolation)
    from_uint8 = ops.resized_crop(images, top, left, height, width, size, flip, interpolation)
    mode = BICUBIC if interpolation == "bicubic" else BILINEAR
    for i, (top_i, left_i, height_i, width_i, mirrored) in enumerate(BOXES):
        reference = TF.resized_crop(
            x[i], top_i, left_i, height_i, width_i, list(size), mode, antialias=True
        )
        reference = TF.horizontal_flip(reference) if mirrored else reference
        torch.testing.assert_close(ours[i], reference.clamp(0, 1), atol=1e-5, rtol=0)
    torch.testing.assert_close(from_uint8, ours, atol=1e-6, rtol=0)


def test_resized_crop_views_read_image_r_mod_b():
    images = random_images((2, 3, 20, 20))
    box = [torch.tensor([0, 2, 4, 1]) for _ in range(2)] + [torch.tensor([12, 10, 9, 15])] * 2
    both = ops.resized_crop(images, *box, (8, 8))
    for row in range(4):
        single = [value[row : row + 1] for value in box]
        torch.testing.assert_close(
            both[row], ops.resized_crop(images[row % 2 : row % 2 + 1], *single, (8, 8))[0]
        )


def test_resized_crop_matches_pil_on_photos(photos):
    """solo-learn resizes PIL images, uint8 between the two passes: overshoot at edges is clipped
    there and not here (measured: mean <= 0.33, max 7.9 levels)."""
    for image in photos:
        width, height = image.size
        for top, left, crop_h, crop_w, size in [
            (height // 8, width // 10, height // 2, width // 2, 224),
            (height // 3, width // 3, max(2, height // 9), max(2, width // 8), 32),
            (0, 0, height, width, 32),
        ]:
            box = [torch.tensor([value]) for value in (top, left, crop_h, crop_w)]
            ours = ops.resized_crop(as_tensor(image), *box, (size, size))
            region = image.crop((left, top, left + crop_w, top + crop_h))  # torchvision's PIL path
            difference = levels(ours, region.resize((size, size), Image.BICUBIC))
            assert difference.mean() < 0.4 and difference.max() <= 10


@pytest.mark.parametrize("shape", [(2, 3, 37, 53), (2, 3, 60, 41), (2, 3, 32, 32)])
@pytest.mark.parametrize("resize_size, crop_size", [(36, 32), (32, 32), (73, 64)])
def test_resize_center_crop_matches_torchvision(shape, resize_size, crop_size):
    images = random_images(shape)
    ours = ops.resize_center_crop(images, resize_size, crop_size)
    reference = TF.center_crop(
        TF.resize(images.float() / 255, resize_size, BILINEAR, antialias=True), crop_size
    )
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)
    whole = ops.resize_center_crop(images, resize_size, None, interpolation="bicubic")
    reference = TF.resize(images.float() / 255, resize_size, BICUBIC, antialias=True).clamp(0, 1)
    torch.testing.assert_close(whole, reference, atol=1e-5, rtol=0)


FACTORS = torch.tensor([0.0, 0.6, 1.0, 1.4, 2.5])


@pytest.mark.parametrize(
    "op, reference",
    [(0, TF.adjust_brightness), (1, TF.adjust_contrast), (2, TF.adjust_saturation)],
)
@pytest.mark.parametrize("shape", [(5, 3, 8, 8), (5, 3, 17, 31)])
def test_blends_match_torchvision(op, reference, shape):
    """Colour jitter with one op moving (the others at factor 1: exact identities)."""
    images = random_images(shape, seed=1)
    x = images.float() / 255
    factors = torch.ones(len(FACTORS), 3)
    factors[:, op] = FACTORS
    out = ops.color_jitter(images, factors, None, torch.tensor([[0, 1, 2]] * len(FACTORS)))
    for i, factor in enumerate(FACTORS.tolist()):
        torch.testing.assert_close(out[i], reference(x[i], factor), atol=2e-4, rtol=0)
        # uint8 in torchvision: the luma is truncated to a level (an error scaled by |1 - factor|)
        # and so is the blend
        bound = 1 + abs(1 - factor) + 0.05
        assert (out[i] * 255 - reference(images[i], factor).float()).abs().max() <= bound


@pytest.mark.parametrize("shape", [(6, 3, 8, 8), (6, 3, 19, 27)])
def test_hue_matches_torchvision(shape):
    images = random_images(shape, seed=2)
    shifts = torch.tensor([-0.5, -0.3, 0.0, 0.05, 0.25, 0.5])
    out = ops.adjust_hue(images, shifts)
    for i, shift in enumerate(shifts.tolist()):
        torch.testing.assert_close(
            out[i], TF.adjust_hue(images[i].float() / 255, shift), atol=1e-5, rtol=0
        )


def test_hue_keeps_grays_and_primaries():
    gray = torch.full((1, 3, 2, 2), 0.4)
    assert torch.equal(ops.adjust_hue(gray, torch.tensor([0.3])), gray)
    red = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
    green = ops.adjust_hue(red, torch.tensor([1 / 3]))
    torch.testing.assert_close(green.flatten(), torch.tensor([0.0, 1.0, 0.0]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("height, width", [(9, 13), (70, 80)])  # small and large-image paths
def test_color_jitter_runs_every_order_like_torchvision(height, width):
    """All 24 orders of brightness, contrast, saturation and hue, each against torchvision's ops
    applied one after the other in that order."""
    generator = torch.Generator().manual_seed(3)
    x = torch.rand(24, 3, height, width, generator=generator)
    orders = torch.tensor(list(itertools.permutations(range(4))))
    factors = ops.uniform(generator, (24, 3), "cpu", 0.4, 1.6)
    hue = ops.uniform(generator, 24, "cpu", -0.5, 0.5)
    out = ops.color_jitter(x, factors, hue, orders)
    functions = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    for i, order in enumerate(orders.tolist()):
        reference = x[i]
        for op in order:
            reference = functions[op](reference, float(hue[i] if op == 3 else factors[i, op]))
        torch.testing.assert_close(out[i], reference, atol=2e-4, rtol=0)
    orders = torch.tensor(list(itertools.permutations(range(3))))
    without_hue = ops.color_jitter(x[:6], factors[:6], None, orders)
    for i, order in enumerate(orders.tolist()):
        reference = x[i]
        for op in order:
            reference = functions[op](reference, float(factors[i, op]))
        torch.testing.assert_close(without_hue[i], reference, atol=2e-4, rtol=0)


def test_color_jitter_identity_is_exact():
    x = torch.rand(24, 3, 5, 6, generator=torch.Generator().manual_seed(4))
    orders = torch.tensor(list(itertools.permutations(range(4))))
    assert torch.equal(ops.color_jitter(x, torch.ones(24, 3), torch.zeros(24), orders), x)


def test_grayscale_matches_torchvision_and_pil(photos):
    images = random_images((3, 3, 11, 7), seed=5)
    apply = torch.tensor([True, False, True])
    out = ops.grayscale(images, apply)
    reference = TF.rgb_to_grayscale(images[0].float() / 255, num_output_channels=3)
    torch.testing.assert_close(out[0], reference, atol=2e-4, rtol=0)
    assert torch.equal(out[1], images[1].float() / 255)
    for image in photos:
        difference = levels(ops.grayscale(as_tensor(image)), image.convert("L").convert("RGB"))
        assert difference.max() <= 0.5 + 1e-3


@pytest.mark.parametrize("shape", [(4, 3, 32, 32), (4, 3, 16, 40), (4, 1, 24, 24)])
def test_gaussian_blur_matches_torchvision(shape):
    x = random_images(shape, seed=6).float() / 255
    sigma = torch.tensor([0.1, 0.7, 1.3, 2.0])
    out = ops.gaussian_blur(x, sigma, radius=6)
    for i, s in enumerate(sigma.tolist()):
        torch.testing.assert_close(
            out[i], TF.gaussian_blur(x[i], [13, 13], [s, s]), atol=1e-5, rtol=0
        )
    partial = ops.gaussian_blur(x, sigma, 6, apply=torch.tensor([True, False, False, True]))
    assert torch.equal(partial[1], x[1]) and torch.equal(partial[0], out[0])


def test_gaussian_blur_against_pil_box_blur(photos):
    """PIL's GaussianBlur is three box blurs: a mean difference under 1 level, larger at edges
    (measured: mean 0.35-0.85, max 35 levels, sigma 0.5-2 on these photos)."""
    from PIL import ImageFilter

    for image in photos:
        for sigma in (0.5, 1.0, 2.0):
            ours = ops.gaussian_blur(as_tensor(image), torch.tensor([sigma]), 6)
            difference = levels(ours, image.filter(ImageFilter.GaussianBlur(radius=sigma)))
            assert difference.mean() < 1.0 and difference.max() < 40


def test_solarize_matches_torchvision_and_pil(photos):
    images = random_images((3, 3, 9, 10), seed=7)
    apply = torch.tensor([True, True, False])
    out = ops.solarize(images, apply)
    assert torch.equal(out[0], TF.solarize(images[0].float() / 255, 128 / 255))
    assert torch.equal(out[2], images[2].float() / 255)
    for image in photos[2:]:
        assert (
            levels(ops.solarize(as_tensor(image)), ImageOps.solarize(image)).max() < 1e-3
        )  # float rounding only


@pytest.mark.parametrize("shape", [(4, 3, 32, 32), (4, 3, 13, 45)])
def test_equalize_matches_torchvision_and_pil(shape, photos):
    images = random_images(shape, seed=8)
    images[1] = images[1] // 64  # a few levels only
    images[2] = 17  # one level: unchanged
    images[3, :, :5] = 255  # a peak at the top level
    out = ops.equalize(images)
    for i in range(shape[0]):
        assert torch.equal(out[i] * 255, TF.equalize(images[i]).float())
    assert torch.equal(ops.equalize(images.float() / 255), out)
    for image in photos[2:]:
        assert levels(ops.equalize(as_tensor(image)), ImageOps.equalize(image)).max() < 1e-3


def test_normalize_matches_torchvision():
    x = torch.rand(3, 3, 6, 5, generator=torch.Generator().manual_seed(9))
    mean, std = torch.tensor([0.4914, 0.4822, 0.4465]), torch.tensor([0.247, 0.243, 0.261])
    torch.testing.assert_close(
        ops.normalize(x, mean, std), TF.normalize(x, mean.tolist(), std.tolist())
    )
    per_sample = ops.normalize(x, mean.expand(3, 3), std.expand(3, 3))
    torch.testing.assert_close(per_sample, TF.normalize(x, mean.tolist(), std.tolist()))


def test_erase_matches_torchvision():
    x = torch.randn(3, 3, 12, 17, generator=torch.Generator().manual_seed(10))
    box = (
        torch.tensor([0, 4, 2]),
        torch.tensor([3, 0, 5]),
        torch.tensor([5, 8, 3]),
        torch.tensor([7, 2, 9]),
    )
    out = ops.erase(x, box, torch.tensor([True, True, False]))
    for i in range(2):
        top, left, height, width = (int(value[i]) for value in box)
        assert torch.equal(out[i], TF.erase(x[i], top, left, height, width, torch.tensor(0.0)))
    assert torch.equal(out[2], x[2])


def test_ops_reject_non_rgb_colour_input():
    with pytest.raises(ValueError, match="3 channels"):
        ops.color_jitter(
            torch.rand(2, 1, 4, 4), torch.ones(2, 3), None, torch.tensor([[0, 1, 2]] * 2)
        )
