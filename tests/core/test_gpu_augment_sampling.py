"""The batched pipeline draws solo-learn's parameter distributions, and parses its YAML nodes.

Distributions: >= 10 000 draws each, fixed seeds, two-sample Kolmogorov-Smirnov statistic against
torchvision's own samplers (``RandomResizedCrop.get_params``, ``RandomErasing.get_params``,
``ColorJitter.get_params`` with ``RandomApply``'s coin, solo-learn's ``random.uniform`` blur sigma),
bounded by the alpha = 0.001 critical value ``1.95 * sqrt((n + m) / (n m))`` (0.0276 for
10 000 + 10 000); rates within 4.5 standard errors. The pipeline's parameters are read back from its
output on designed images (a ramp shows a flip, a delta the blur's sigma, a constant the factor).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import re
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare, ks_2samp
from torchvision import transforms

from solo_diet.core.data import augment as ops
from solo_diet.core.data import pipeline
from solo_diet.core.data.pipeline import (
    AugmentationNode,
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
from tests._helpers.core import BAD_NODES

N = 10_000
REPO = Path(__file__).resolve().parents[2]
OFF = {"prob": 0.0}


def ks_bound(n: int, m: int) -> float:
    return 1.95 * math.sqrt((n + m) / (n * m))


def assert_same_distribution(ours, reference) -> None:
    ours, reference = torch.as_tensor(ours).double(), torch.as_tensor(reference).double()
    statistic = ks_2samp(ours.numpy(), reference.numpy()).statistic
    assert statistic < ks_bound(len(ours), len(reference)), statistic


def assert_rate(observed: torch.Tensor, p: float) -> None:
    rate = observed.double().mean().item()
    assert abs(rate - p) <= 4.5 * math.sqrt(p * (1 - p) / observed.numel()) + 1e-12, (rate, p)


def node(**sections) -> dict:
    """A custom-dataset node with every op off, no crop (resize to the image size) and identity
    normalisation, so the output shows exactly what the op under test did."""
    base = {
        "rrc": {"enabled": False},
        "color_jitter": OFF,
        "grayscale": OFF,
        "gaussian_blur": OFF,
        "solarization": OFF,
        "equalization": OFF,
        "horizontal_flip": OFF,
        "random_erasing": OFF,
        "mean": [0.0, 0.0, 0.0],
        "std": [1.0, 1.0, 1.0],
        "crop_size": 8,
        "num_crops": 1,
    }
    return {**base, **sections}


def run(nodes, images, seed=0):
    augmentation = MultiCropAugmentation.from_config(nodes, "custom")
    return augmentation(images, torch.Generator().manual_seed(seed))


# --- samplers against torchvision's --------------------------------------------------------------


@pytest.mark.parametrize(
    "height, width, scale", [(32, 32, (0.08, 1.0)), (24, 40, (0.08, 1.0)), (20, 60, (0.9, 1.0))]
)
@pytest.mark.slow  # over 2 s
def test_resized_crop_boxes_match_torchvision(height, width, scale):
    torch.manual_seed(0)
    image = torch.empty(1, height, width)
    reference = torch.tensor(
        [
            transforms.RandomResizedCrop.get_params(image, list(scale), [3 / 4, 4 / 3])
            for _ in range(N)
        ]
    ).double()
    generator = torch.Generator().manual_seed(0)
    ours = torch.stack(ops.sample_resized_crop_boxes(generator, N, height, width, scale, "cpu"), 1)
    ours = ours.double()
    for boxes in (ours, reference):
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 0] + boxes[:, 2] <= height).all()
        assert (boxes[:, 1] >= 0).all() and (boxes[:, 1] + boxes[:, 3] <= width).all()

    def statistics(boxes):
        top, left, h, w = boxes.unbind(1)
        return (
            h * w / (height * width),
            w / h,
            (top + 0.5) / (height - h + 1),
            (left + 0.5) / (width - w + 1),
        )

    for ours_values, reference_values in zip(statistics(ours), statistics(reference)):
        assert_same_distribution(ours_values, reference_values)


def test_resized_crop_scale_may_differ_per_sample():
    low = torch.tensor([0.5, 0.08]).repeat(N // 2)
    high = torch.tensor([0.5, 1.0]).repeat(N // 2)
    _, _, h, w = ops.sample_resized_crop_boxes(
        torch.Generator().manual_seed(1), N, 64, 64, (low, high), "cpu"
    )
    area = (h * w).double() / 64**2
    assert (area[0::2] - 0.5).abs().max() < 0.05  # rounding of the sides only
    assert area[1::2].min() < 0.1 and area[1::2].max() > 0.9


def test_erasing_boxes_match_torchvision():
    torch.manual_seed(0)
    image = torch.empty(3, 16, 20)
    reference = []
    for _ in range(N):
        _, _, h, w, value = transforms.RandomErasing.get_params(
            image, (0.02, 0.33), (0.3, 3.3), [0]
        )
        reference.append(0.0 if value is image else h * w / 320)
    ours_box, found = ops.sample_erasing_boxes(torch.Generator().manual_seed(0), N, 16, 20, "cpu")
    _, _, h, w = ours_box
    ours = torch.where(found, h * w / 320, 0.0)
    assert_same_distribution(ours, reference)


def test_jitter_order_is_a_uniform_permutation():
    orders = ops.sample_order(torch.Generator().manual_seed(0), 24 * 1000, 4, "cpu")
    assert torch.equal(orders.sort(1).values, torch.arange(4).expand(24_000, 4))
    permutations = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = torch.bincount(
        torch.tensor([permutations[tuple(o)] for o in orders.tolist()]), minlength=24
    )
    assert chisquare(counts.numpy()).statistic < 49.7  # chi-square(23 dof) at alpha = 0.001


# --- the pipeline's draws, read back from its output ----------------------------------------------


def test_flip_rate_per_node():
    ramp = torch.linspace(0, 1, 8).expand(N, 3, 8, 8)
    views = run([node(horizontal_flip={"prob": 0.5}), node(horizontal_flip={"prob": 0.2})], ramp)
    for view, p in zip(views, (0.5, 0.2)):
        flipped = view[:, 0, 0, 0] > view[:, 0, 0, -1]
        assert_rate(flipped, p)
        assert torch.equal(view[~flipped], ramp[~flipped])  # exact when not flipped


@pytest.mark.slow  # over 2 s
def test_grayscale_solarization_and_erasing_rates():
    colour = torch.tensor([0.8, 0.5, 0.1]).view(1, 3, 1, 1).expand(N, 3, 8, 8)
    views = run([node(grayscale={"prob": 0.2}), node(solarization={"prob": 0.2})], colour)
    assert_rate((views[0][:, 0] == views[0][:, 2]).all(-1).all(-1), 0.2)
    solarized = views[1][:, 0, 0, 0] == 1 - colour[0, 0, 0, 0]
    assert_rate(solarized, 0.2)
    assert torch.equal(views[1][:, 2], colour[:, 2])  # below the threshold: never solarized

    ones = torch.ones(N, 3, 16, 20)
    (erased,) = run([node(random_erasing={"prob": 0.25}, crop_size=16)], ones)
    erased_area = (erased[:, 0] == 0).double().mean((-2, -1))
    torch.manual_seed(0)
    reference = []
    for _ in range(N):
        _, _, h, w, value = transforms.RandomErasing.get_params(
            ones[0], (0.02, 0.33), (0.3, 3.3), [0]
        )
        erase = torch.rand(1).item() < 0.25 and value is not ones[0]
        reference.append(h * w / 320 if erase else 0.0)
    assert_same_distribution(erased_area, reference)


def blur_centre(sigma: float, radius: int = 6) -> float:
    """The centre of a blurred unit impulse: the squared central tap of the normalised kernel."""
    taps = [math.exp(-0.5 * (d / sigma) ** 2) for d in range(-radius, radius + 1)]
    return (1 / sum(taps)) ** 2


@pytest.mark.slow  # over 2 s
def test_blur_rate_and_sigma():
    impulse = torch.zeros(N, 3, 16, 16)
    impulse[:, :, 8, 8] = 1
    views = run(
        [
            node(gaussian_blur={"prob": 1.0}, crop_size=16),
            node(gaussian_blur={"prob": 0.1}, crop_size=16),
        ],
        impulse,
    )
    random.seed(0)
    for view, p in zip(views, (1.0, 0.1)):
        reference = [
            blur_centre(random.uniform(0.1, 2.0)) if random.random() < p else 1.0 for _ in range(N)
        ]
        assert_same_distribution(view[:, 0, 8, 8], reference)


def jitter_reference(p: float, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0):
    """torchvision's ColorJitter factors under solo-learn's RandomApply(p); 1 (hue: 0) when off."""
    torch.manual_seed(0)
    jitter = transforms.ColorJitter(brightness, contrast, saturation, hue)
    ranges = jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue
    draws = []
    for _ in range(N):
        _, *factors = transforms.ColorJitter.get_params(*ranges)
        applied = not p < torch.rand(1)
        draws.append(
            [
                f if applied and f is not None else (0.0 if i == 3 else 1.0)
                for i, f in enumerate(factors)
            ]
        )
    return torch.tensor(draws)


@pytest.mark.slow  # over 2 s
def test_jitter_factor_distributions():
    half = torch.full((N, 3, 8, 8), 0.25)
    half[..., 4:] = 0.75
    gray = torch.full((N, 3, 8, 8), 0.5)
    colour = torch.tensor([0.75, 0.5, 0.25]).view(1, 3, 1, 1).expand(N, 3, 8, 8)

    (bright,) = run([node(color_jitter={"prob": 0.8, "brightness": 0.4})], gray)
    assert_same_distribution(bright[:, 0, 0, 0] / 0.5, jitter_reference(0.8, brightness=0.4)[:, 0])
    (contrast,) = run([node(color_jitter={"prob": 0.8, "contrast": 0.4})], half)
    observed = (contrast[:, 0, 0, -1] - contrast[:, 0, 0, 0]) / 0.5
    assert_same_distribution(observed, jitter_reference(0.8, contrast=0.4)[:, 1])
    (saturated,) = run([node(color_jitter={"prob": 0.3, "saturation": 0.2})], colour)
    observed = (saturated[:, 0, 0, 0] - saturated[:, 2, 0, 0]) / 0.5
    assert_same_distribution(observed, jitter_reference(0.3, saturation=0.2)[:, 2])
    (shifted,) = run([node(color_jitter={"prob": 0.8, "hue": 0.1})], colour)
    # (0.75, 0.5, 0.25) has hue 1/12; a shift within +-0.1 keeps it in the red-yellow sectors
    shift = hue_of(shifted[:, :, 0, 0]) - hue_of(colour[:, :, 0, 0])
    assert_same_distribution(shift, jitter_reference(0.8, hue=0.1)[:, 3])


def hue_of(rgb: torch.Tensor) -> torch.Tensor:
    """HSV hue of colours with blue the smallest channel."""
    r, g, b = rgb.unbind(1)
    return torch.where(r >= g, (g - b) / (r - b), 2 - (r - b) / (g - b)) / 6


def test_crop_scale_comes_from_each_node():
    ramp = torch.linspace(0, 1, 32).expand(2000, 3, 32, 32)
    rrc = {"enabled": True, "crop_min_scale": 1.0, "crop_max_scale": 1.0}
    small = {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 0.1}
    whole, part = run([node(rrc=rrc, crop_size=32), node(rrc=small, crop_size=32)], ramp)
    whole_spread, part_spread = (view[:, 0, 0, -1] - view[:, 0, 0, 0] for view in (whole, part))
    assert whole_spread.min() > 0.9 and part_spread.max() < 0.5


# --- pipeline structure and config ---------------------------------------------------------------


def test_multi_crop_views_come_node_by_node():
    nodes = [
        node(crop_size=16, num_crops=2, mean=[0.0] * 3),
        node(crop_size=8, num_crops=3, mean=[0.5] * 3),
        node(crop_size=16, num_crops=1, mean=[1.0] * 3, horizontal_flip={"prob": 0.5}),
    ]
    augmentation = MultiCropAugmentation.from_config(nodes, "custom")
    assert augmentation.num_views == 6
    views = augmentation(torch.full((4, 3, 20, 24), 255, dtype=torch.uint8), torch.Generator())
    assert [tuple(v.shape) for v in views] == [(4, 3, 16, 19)] * 2 + [(4, 3, 8, 9)] * 3 + [
        (4, 3, 16, 19)
    ]
    for view, value in zip(views, [1.0, 1.0, 0.5, 0.5, 0.5, 0.0]):
        assert view.dtype == torch.float32
        torch.testing.assert_close(view, torch.full_like(view, value), atol=1e-6, rtol=0)


def test_normalisation_uses_solo_learn_statistics():
    images = torch.full((2, 3, 32, 32), 100, dtype=torch.uint8)
    for dataset, (mean, std) in pipeline.DATASET_STATS.items():
        (view,) = MultiCropAugmentation.from_config([{"crop_size": 32, "num_crops": 1}], dataset)(
            images
        )
        expected = (100 / 255 - torch.tensor(mean)) / torch.tensor(std)
        torch.testing.assert_close(view.mean((0, 2, 3)), expected.float(), atol=1e-5, rtol=0)
    assert AugmentationNode.from_config({}, "custom").mean == pipeline.IMAGENET_STATS[0]


def test_defaults_are_solo_learns():
    parsed = AugmentationNode.from_config({}, "imagenet")
    assert parsed == AugmentationNode()
    assert (parsed.crop_size, parsed.num_crops, parsed.crop_min_scale, parsed.crop_max_scale) == (
        224,
        2,
        0.08,
        1.0,
    )
    probabilities = (
        parsed.jitter_prob,
        parsed.grayscale_prob,
        parsed.blur_prob,
        parsed.solarization_prob,
    )
    assert probabilities + (parsed.equalization_prob, parsed.flip_prob) == (
        0.8,
        0.2,
        0.5,
        0.0,
        0.0,
        0.5,
    )
    jitter = AugmentationNode.from_config(
        {"color_jitter": {"brightness": 0.4, "hue": [-0.2, 0.1]}}, "cifar10"
    )
    assert (
        jitter.brightness == (0.6, 1.4)
        and jitter.hue == (-0.2, 0.1)
        and jitter.contrast == (1.0, 1.0)
    )


def shipped_nodes():
    folders = {"cifar": "cifar10", "custom": "custom", "imagenet-100": "imagenet100"}
    for path in sorted(REPO.glob("scripts/pretrain/*/augmentations/*.yaml")):
        yield path, folders[path.parent.parent.name]
    for path in sorted(REPO.glob("solo_diet/configs/**/augmentations/*.yaml")):
        yield path, "custom"
    for path in sorted(solo_learn_scripts().glob("pretrain/*/augmentations/*.yaml")):
        dataset = {"cifar": "cifar10", "imagenet-100": "imagenet100", "imagenet": "imagenet"}
        yield path, dataset.get(path.parent.parent.name, "custom")


def solo_learn_scripts() -> Path:
    """``scripts/`` of the solo-learn source installed (editable, as install.sh does), found
    without importing it; a folder that does not exist when solo-learn is absent."""
    spec = importlib.util.find_spec("solo")
    origin = spec.origin if spec is not None and spec.origin else "/nonexistent/solo/__init__.py"
    return Path(origin).parents[1] / "scripts"


def test_shipped_yaml_nodes_parse():
    import omegaconf

    parsed = 0
    for path, dataset in shipped_nodes():
        nodes = omegaconf.OmegaConf.load(path)
        augmentation = MultiCropAugmentation.from_config(nodes, dataset)
        assert augmentation.num_views == sum(n.num_crops for n in nodes)
        parsed += 1
    assert parsed >= 10


@pytest.mark.parametrize("change, argument", BAD_NODES)
def test_errors_name_the_argument_inside_the_nodes(change, argument):
    nodes = [{"crop_size": 32}, {"crop_size": 32, **change}]
    with pytest.raises(ValueError, match="^" + re.escape(f"argument `{argument}`")):
        MultiCropAugmentation.from_config(nodes, "cifar10")


def test_unknown_dataset_and_empty_list_are_errors():
    with pytest.raises(ValueError, match="^argument `dataset` must be one of"):
        MultiCropAugmentation.from_config([{}], "cifar11")
    with pytest.raises(ValueError, match="^argument `nodes` must list at least one"):
        MultiCropAugmentation.from_config([], "cifar10")


def test_ops_with_probability_zero_are_never_computed(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("an op with probability 0 was computed")

    for name in ("color_jitter", "grayscale", "gaussian_blur", "solarize", "equalize", "erase"):
        monkeypatch.setattr(ops, name, forbidden)
    no_strength = node(color_jitter={"prob": 0.8, "brightness": 0.0}, rrc={"enabled": True})
    views = run([no_strength, node(horizontal_flip={"prob": 0.5})], torch.rand(4, 3, 8, 8))
    assert len(views) == 2


def test_same_seed_same_views_other_seed_other_views():
    nodes = [
        node(
            color_jitter={"prob": 0.8, "brightness": 0.4, "hue": 0.1},
            rrc={"enabled": True},
            num_crops=2,
        )
    ]
    images = torch.randint(0, 256, (8, 3, 12, 12), dtype=torch.uint8)
    first, second, other = run(nodes, images, 5), run(nodes, images, 5), run(nodes, images, 6)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], other[0]) and not torch.equal(first[0], first[1])


def test_probe_transforms_match_torchvision():
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    images = torch.randint(
        0, 256, (3, 3, 40, 50), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    reference = transforms.Compose(
        [
            transforms.Resize(round(32 * 256 / 224)),
            transforms.CenterCrop(32),
            transforms.Normalize(mean, std),
        ]
    )
    ours = EvalTransform(32, mean, std)(images)
    torch.testing.assert_close(ours, reference(images.float() / 255), atol=1e-4, rtol=0)
    same_size = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    identity = EvalTransform(32, mean, std, resize_size=32)(same_size)
    torch.testing.assert_close(identity, transforms.Normalize(mean, std)(same_size.float() / 255))
    train = ProbeTrainTransform(16, mean, std)(images, torch.Generator().manual_seed(0))
    assert train.shape == (3, 3, 16, 16) and train.dtype == torch.float32


def test_captured_augmentation_runs_eagerly_on_cpu():
    nodes = [node(horizontal_flip={"prob": 0.5}, num_crops=2)]
    images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    captured = CapturedAugmentation(
        MultiCropAugmentation.from_config(nodes, "custom"), torch.Generator().manual_seed(3)
    )
    views = captured(images)
    assert all(torch.equal(a, b) for a, b in zip(views, run(nodes, images, seed=3)))
    with pytest.raises(ValueError, match="generator it was built with"):
        captured(images, torch.Generator())
