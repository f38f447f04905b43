"""solo-learn's augmentation nodes parsed and checked, and its normalisation statistics."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from solo_diet.core.errors import Argument, ArgumentError
from solo_diet.core.settings import KeyReader, is_number

IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
DATASET_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261)),
    "imagenet100": IMAGENET_STATS,
    "imagenet": IMAGENET_STATS,
}
"""solo-learn's per-dataset normalisation; ``custom`` takes the node's mean/std or ImageNet's."""

_SECTIONS = {
    "rrc": ("enabled", "crop_min_scale", "crop_max_scale"),
    "color_jitter": ("prob", "brightness", "contrast", "saturation", "hue"),
    "grayscale": ("prob",),
    "gaussian_blur": ("prob",),
    "solarization": ("prob",),
    "equalization": ("prob",),
    "horizontal_flip": ("prob",),
    "random_erasing": ("prob",),
}
_TOP_KEYS = ("crop_size", "num_crops", "mean", "std") + tuple(_SECTIONS)


def node_argument(path: str) -> Argument:
    """The argument a key path names (``nodes[0].rrc.x``: ``nodes``, then the rest)."""
    head = path.split("[")[0].split(".")[0]
    return Argument(head, path[len(head) :])


class _Reader(KeyReader):
    """A KeyReader over a node argument whose errors name ``argument `<argument>.<key>```."""

    def fail(self, key: str, problem: str) -> ArgumentError:
        space = "" if problem[:1] in (":", ",") else " "
        return ArgumentError(node_argument(self.name(key)), f"{space}{problem}")

    def jitter_range(self, key: str, centre: float, low: float, high: float) -> tuple[float, float]:
        """torchvision ColorJitter's range: strength s -> [max(low, centre - s), centre + s], or an
        explicit ``[min, max]`` inside ``[low, high]``."""
        value = self.value(f"color_jitter.{key}", 0.0)
        if is_number(value) and value >= 0 and centre + value <= high:
            return max(low, centre - value), centre + value
        pair = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []
        if len(pair) == 2 and all(map(is_number, pair)) and low <= pair[0] <= pair[1] <= high:
            return float(pair[0]), float(pair[1])
        raise self.fail(
            f"color_jitter.{key}",
            f"must be a strength in [0, {high - centre}] or a [min, max] pair inside "
            f"[{low}, {high}], got {value!r}.",
        )

    def stats(self, dataset: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Normalisation: the dataset's own (solo-learn), or the node's / ImageNet's for custom."""
        result = []
        for key, own in zip(("mean", "std"), DATASET_STATS.get(dataset, IMAGENET_STATS)):
            value = self.value(key, own)
            values = (
                list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []
            )
            numbers = len(values) == 3 and all(map(is_number, values))
            if not numbers or (key == "std" and min(values) <= 0):
                raise self.fail(
                    key, f"must be 3 numbers (std > 0), one per RGB channel, got {value!r}."
                )
            if dataset in DATASET_STATS and tuple(map(float, values)) != own:
                raise ArgumentError(
                    node_argument(self.name(key)),
                    " is ignored by solo-learn for ",
                    Argument("dataset", f": {dataset}"),
                    f" (it normalises with {own}); remove it, or use ",
                    Argument("dataset", ": custom"),
                    " to set your own.",
                )
            result.append(tuple(map(float, values)))
        return result[0], result[1]


@dataclass(frozen=True)
class AugmentationNode:
    """One solo-learn augmentation node, solo-learn's defaults (jitter ranges: ColorJitter's)."""

    crop_size: int = 224
    num_crops: int = 2
    mean: tuple[float, ...] = IMAGENET_STATS[0]
    std: tuple[float, ...] = IMAGENET_STATS[1]
    rrc: bool = True
    crop_min_scale: float = 0.08
    crop_max_scale: float = 1.0
    jitter_prob: float = 0.8
    brightness: tuple[float, float] = (1.0, 1.0)
    contrast: tuple[float, float] = (1.0, 1.0)
    saturation: tuple[float, float] = (1.0, 1.0)
    hue: tuple[float, float] = (0.0, 0.0)
    grayscale_prob: float = 0.2
    blur_prob: float = 0.5
    solarization_prob: float = 0.0
    equalization_prob: float = 0.0
    flip_prob: float = 0.5
    erasing_prob: float = 0.0

    @classmethod
    def from_config(cls, node: Mapping, dataset: str, *, name: str = "node") -> AugmentationNode:
        """Parse a node of ``dataset``; errors name ``argument `<name>.<key>```."""
        if dataset not in DATASET_STATS and dataset != "custom":
            choices = sorted(DATASET_STATS) + ["custom"]
            raise ArgumentError(Argument("dataset"), f" must be one of {choices}, got {dataset!r}.")
        if not isinstance(node, Mapping):
            raise ArgumentError(
                node_argument(name), f" must be a mapping of augmentation keys, got {node!r}."
            )
        check_augmentation_keys(node, name)
        read = _Reader(node, name)
        enabled = read.bool("rrc.enabled", default=True)
        scale = tuple(
            read.value(f"rrc.crop_{end}_scale", dflt) for end, dflt in (("min", 0.08), ("max", 1.0))
        )
        if not (all(map(is_number, scale)) and 0 < scale[0] <= scale[1] <= 1):
            raise read.fail(
                "rrc.crop_min_scale", f"and crop_max_scale need 0 < min <= max <= 1, got {scale}."
            )
        mean, std = read.stats(dataset)
        return cls(
            crop_size=read.int("crop_size", 2, default=224),
            num_crops=read.int("num_crops", 1, default=2),
            mean=mean,
            std=std,
            rrc=enabled,
            crop_min_scale=float(scale[0]),
            crop_max_scale=float(scale[1]),
            jitter_prob=read.probability("color_jitter.prob", 0.8),
            brightness=read.jitter_range("brightness", 1.0, 0.0, math.inf),
            contrast=read.jitter_range("contrast", 1.0, 0.0, math.inf),
            saturation=read.jitter_range("saturation", 1.0, 0.0, math.inf),
            hue=read.jitter_range("hue", 0.0, -0.5, 0.5),
            grayscale_prob=read.probability("grayscale.prob", 0.2),
            blur_prob=read.probability("gaussian_blur.prob", 0.5),
            solarization_prob=read.probability("solarization.prob", 0.0),
            equalization_prob=read.probability("equalization.prob", 0.0),
            flip_prob=read.probability("horizontal_flip.prob", 0.5),
            erasing_prob=read.probability("random_erasing.prob", 0.0),
        )

    @property
    def jitters(self) -> bool:
        ranges = (self.brightness, self.contrast, self.saturation)
        return self.jitter_prob > 0 and (any(r != (1.0, 1.0) for r in ranges) or self.shifts_hue)

    @property
    def shifts_hue(self) -> bool:
        return self.jitter_prob > 0 and self.hue != (0.0, 0.0)


def check_augmentation_keys(node: Mapping, name: str = "node") -> None:
    """Refuse a node key outside solo-learn's pipeline, which solo-learn would ignore."""
    for key, section in node.items():
        if key not in _TOP_KEYS:
            raise ArgumentError(
                node_argument(f"{name}.{key}"),
                f" is not an augmentation key of solo-learn's pipeline (known: {list(_TOP_KEYS)});"
                " remove it.",
            )
        if key in _SECTIONS and isinstance(section, Mapping):
            for sub in section:
                if sub not in _SECTIONS[key]:
                    raise ArgumentError(
                        node_argument(f"{name}.{key}.{sub}"),
                        f" is not a key of solo-learn's `{key}` (known: {list(_SECTIONS[key])}); "
                        "remove it.",
                    )
        elif key in _SECTIONS and section is not None:
            raise ArgumentError(
                node_argument(f"{name}.{key}"), f" must be a mapping, got {section!r}."
            )
