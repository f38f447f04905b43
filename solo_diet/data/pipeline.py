"""solo-learn's augmentation YAML as batched GPU pipelines (torch only).

:class:`AugmentationNode` parses one node of solo-learn's ``augmentations`` list (every key of
``solo.data.pretrain_dataloader.build_transform_pipeline``, plus our ``random_erasing``);
:class:`MultiCropAugmentation` turns the list into views, node by node and ``num_crops`` times each,
as solo-learn's ``FullTransformPipeline`` of ``NCropAugmentation`` s. :class:`EvalTransform` and
:class:`ProbeTrainTransform` are the probes' validation and training transforms. The op order per
view is solo-learn's: crop (or resize), colour jitter, grayscale, blur, solarization, equalization,
flip, normalisation, random erasing. An op whose probability is 0 in every node is never computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from solo_diet.config import ConfigError
from solo_diet.data import augment as ops

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
_GPU_HINT = "or train with data.format: image_folder"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _get(node: Mapping, key: str, default: Any) -> Any:
    """``node[a][b]`` for ``key = "a.b"``, or ``default`` when absent (the string "None" too)."""
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None or node == "None" else node


class _Reader:
    """Reads and checks one node's values; every error names ``<prefix>.<key>``."""

    def __init__(self, node: Mapping, prefix: str) -> None:
        self.node, self.prefix = node, prefix

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"`{self.prefix}.{key}` {problem}")

    def probability(self, section: str, default: float) -> float:
        value = _get(self.node, f"{section}.prob", default)
        if not _number(value) or not 0 <= value <= 1:
            raise self.fail(f"{section}.prob", f"must be a probability in [0, 1], got {value!r}.")
        return float(value)

    def positive_int(self, key: str, default: int, minimum: int = 1) -> int:
        value = _get(self.node, key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}, got {value!r}.")
        return value

    def jitter_range(self, key: str, centre: float, low: float, high: float) -> tuple[float, float]:
        """torchvision ColorJitter's range: strength s -> [max(low, centre - s), centre + s], or an
        explicit ``[min, max]`` inside ``[low, high]``."""
        value = _get(self.node, f"color_jitter.{key}", 0.0)
        if _number(value) and value >= 0 and centre + value <= high:
            return max(low, centre - value), centre + value
        pair = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []
        if len(pair) == 2 and all(map(_number, pair)) and low <= pair[0] <= pair[1] <= high:
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
            value = _get(self.node, key, own)
            values = (
                list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []
            )
            if (
                len(values) != 3
                or not all(map(_number, values))
                or (key == "std" and min(values) <= 0)
            ):
                raise self.fail(
                    key, f"must be 3 numbers (std > 0), one per RGB channel, got {value!r}."
                )
            if dataset in DATASET_STATS and tuple(map(float, values)) != own:
                raise self.fail(
                    key,
                    f"is ignored by solo-learn for data.dataset={dataset} (it normalises with "
                    f"{own}); remove it, or use data.dataset: custom to set your own.",
                )
            result.append(tuple(map(float, values)))
        return result[0], result[1]


@dataclass(frozen=True)
class AugmentationNode:
    """One solo-learn augmentation node. Defaults are solo-learn's (its argparse defaults; its Hydra
    path has none); jitter ranges are torchvision ColorJitter's (``(1, 1)``/``(0, 0)``: off)."""

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
    def from_config(
        cls, node: Mapping, dataset: str, *, key: str = "augmentations[]"
    ) -> AugmentationNode:
        """Parse a node (a dict or DictConfig); ``key`` prefixes the names in error messages."""
        if dataset not in DATASET_STATS and dataset != "custom":
            choices = sorted(DATASET_STATS) + ["custom"]
            raise ConfigError(f"`data.dataset` must be one of {choices}, got {dataset!r}.")
        if not isinstance(node, Mapping):
            raise ConfigError(f"`{key}` must be a mapping of augmentation keys, got {node!r}.")
        _check_known_keys(node, key)
        read = _Reader(node, key)
        enabled = _get(node, "rrc.enabled", True)
        if not isinstance(enabled, bool):
            raise read.fail("rrc.enabled", f"must be True or False, got {enabled!r}.")
        scale = tuple(
            _get(node, f"rrc.crop_{end}_scale", dflt) for end, dflt in (("min", 0.08), ("max", 1.0))
        )
        if not (all(map(_number, scale)) and 0 < scale[0] <= scale[1] <= 1):
            raise read.fail(
                "rrc.crop_min_scale", f"and crop_max_scale need 0 < min <= max <= 1, got {scale}."
            )
        mean, std = read.stats(dataset)
        return cls(
            crop_size=read.positive_int("crop_size", 224, minimum=2),
            num_crops=read.positive_int("num_crops", 2),
            mean=mean,
            std=std,
            rrc=enabled,
            crop_min_scale=float(scale[0]),
            crop_max_scale=float(scale[1]),
            jitter_prob=read.probability("color_jitter", 0.8),
            brightness=read.jitter_range("brightness", 1.0, 0.0, math.inf),
            contrast=read.jitter_range("contrast", 1.0, 0.0, math.inf),
            saturation=read.jitter_range("saturation", 1.0, 0.0, math.inf),
            hue=read.jitter_range("hue", 0.0, -0.5, 0.5),
            grayscale_prob=read.probability("grayscale", 0.2),
            blur_prob=read.probability("gaussian_blur", 0.5),
            solarization_prob=read.probability("solarization", 0.0),
            equalization_prob=read.probability("equalization", 0.0),
            flip_prob=read.probability("horizontal_flip", 0.5),
            erasing_prob=read.probability("random_erasing", 0.0),
        )

    @property
    def jitters(self) -> bool:
        ranges = (self.brightness, self.contrast, self.saturation)
        return self.jitter_prob > 0 and (any(r != (1.0, 1.0) for r in ranges) or self.shifts_hue)

    @property
    def shifts_hue(self) -> bool:
        return self.jitter_prob > 0 and self.hue != (0.0, 0.0)


def _check_known_keys(node: Mapping, key: str) -> None:
    for name in node:
        if name not in _TOP_KEYS:
            raise ConfigError(
                f"`{key}.{name}` is not an augmentation key the GPU data path knows (known: "
                f"{list(_TOP_KEYS)}); remove it {_GPU_HINT}."
            )
        section = node[name]
        if name in _SECTIONS and isinstance(section, Mapping):
            for sub in section:
                if sub not in _SECTIONS[name]:
                    raise ConfigError(
                        f"`{key}.{name}.{sub}` is not a key the GPU data path knows (known: "
                        f"{list(_SECTIONS[name])}); remove it {_GPU_HINT}."
                    )
        elif name in _SECTIONS and section is not None:
            raise ConfigError(f"`{key}.{name}` must be a mapping, got {section!r}.")


_COLUMNS = (
    "crop_min_scale", "crop_max_scale", "jitter_prob", "grayscale_prob", "blur_prob",
    "solarization_prob", "equalization_prob", "flip_prob", "erasing_prob",
)  # fmt: skip


class _ViewGroup:
    """The views of one output shape, transformed together as one batch of ``len(nodes) * B`` rows;
    per-row parameters come from each view's node."""

    def __init__(self, nodes: Sequence[AugmentationNode], positions: Sequence[int]) -> None:
        self.nodes, self.positions = list(nodes), list(positions)
        self.crop_size, self.rrc = nodes[0].crop_size, nodes[0].rrc
        self.active = {name: any(getattr(n, name) > 0 for n in nodes) for name in _COLUMNS[2:]}
        self.active["jitter_prob"] = any(n.jitters for n in nodes)
        self.hue = any(n.shifts_hue for n in nodes)
        self._tables: dict[torch.device, torch.Tensor] = {}

    def table(self, device: torch.device) -> torch.Tensor:
        """(views, columns) per-view parameters on ``device``, built once."""
        if device not in self._tables:
            rows = [
                [getattr(n, c) for c in _COLUMNS]
                + [*n.brightness, *n.contrast, *n.saturation, *n.hue, *n.mean, *n.std]
                for n in self.nodes
            ]
            self._tables[device] = torch.tensor(rows, dtype=torch.float32, device=device)
        return self._tables[device]

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        batch, _, height, width = images.shape
        device = images.device
        params = self.table(device).repeat_interleave(batch, 0)
        count = params.shape[0]
        scale = params[:, 0], params[:, 1]
        coins = (
            ops.uniform(generator, (count, len(_COLUMNS) - 2), device)
            < params[:, 2 : len(_COLUMNS)]
        )
        coin = dict(zip(_COLUMNS[2:], coins.unbind(1)))

        def chance(name: str) -> torch.Tensor | None:
            return coin[name] if self.active[name] else None

        flip = chance("flip_prob")
        if self.rrc:
            box = ops.sample_resized_crop_boxes(generator, count, height, width, scale, device)
            size = (self.crop_size, self.crop_size)
            x = ops.resized_crop(images, *box, size, flip=flip, interpolation="bicubic")
        else:
            repeated = images.repeat(len(self.nodes), 1, 1, 1)
            x = ops.resize_center_crop(repeated, self.crop_size, None, flip, "bicubic")
        if self.active["jitter_prob"]:
            x = self._jitter(x, params[:, len(_COLUMNS) :], chance("jitter_prob"), generator)
        if self.active["grayscale_prob"]:
            x = ops.grayscale(x, chance("grayscale_prob"))
        if self.active["blur_prob"]:
            sigma = ops.uniform(generator, count, device, *ops.BLUR_SIGMA)
            radius = min(math.ceil(3 * ops.BLUR_SIGMA[1]), min(x.shape[-2:]) - 1)
            x = ops.gaussian_blur(x, sigma, radius, chance("blur_prob"))
        if self.active["solarization_prob"]:
            x = ops.solarize(x, chance("solarization_prob"))
        if self.active["equalization_prob"]:
            x = ops.equalize(x, chance("equalization_prob"))
        stats = params[:, len(_COLUMNS) + 8 :]
        x = ops.normalize(x, stats[:, :3], stats[:, 3:])
        if self.active["erasing_prob"]:
            box, found = ops.sample_erasing_boxes(generator, count, *x.shape[-2:], device)
            x = ops.erase(x, box, found & chance("erasing_prob"))
        return x

    def _jitter(self, x, ranges, apply, generator) -> torch.Tensor:
        count, device = x.shape[0], x.device
        low, high = ranges[:, 0:6:2], ranges[:, 1:6:2]
        factors = ops.uniform(generator, (count, 3), device, low, high)
        factors = torch.where(apply[:, None], factors, torch.ones_like(factors))
        hue = None
        if self.hue:
            hue = ops.uniform(generator, count, device, ranges[:, 6], ranges[:, 7])
            hue = torch.where(apply, hue, torch.zeros_like(hue))
        order = ops.sample_order(generator, count, 4 if self.hue else 3, device)
        return ops.color_jitter(x, factors, hue, order)


class MultiCropAugmentation:
    """solo-learn's multi-view pipeline on uint8 batches: views node by node, ``num_crops`` per
    node, each a float32 normalised (B, C, crop_size, crop_size) tensor. Views of the same output
    shape are transformed together in one batched pass."""

    def __init__(self, nodes: Sequence[AugmentationNode]) -> None:
        if not nodes:
            raise ConfigError("`augmentations` must list at least one augmentation node.")
        self.nodes = tuple(nodes)
        per_view = [node for node in self.nodes for _ in range(node.num_crops)]
        self.num_views = len(per_view)
        shapes: dict[tuple[int, bool], list[int]] = {}
        for position, node in enumerate(per_view):
            shapes.setdefault((node.crop_size, node.rrc), []).append(position)
        self._groups = [
            _ViewGroup([per_view[p] for p in positions], positions) for positions in shapes.values()
        ]

    @classmethod
    def from_config(cls, nodes: Sequence[Mapping], dataset: str) -> MultiCropAugmentation:
        if isinstance(nodes, Mapping) or not isinstance(nodes, Sequence):
            raise ConfigError(
                f"`augmentations` must be a list of nodes, got {type(nodes).__name__}."
            )
        parsed = [
            AugmentationNode.from_config(node, dataset, key=f"augmentations[{index}]")
            for index, node in enumerate(nodes)
        ]
        return cls(parsed)

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> list[torch.Tensor]:
        """``num_views`` float32 views of a uint8 (or 0..1 float) (B, C, H, W) batch."""
        views: list[torch.Tensor | None] = [None] * self.num_views
        for group in self._groups:
            out = group(images, generator)
            for position, view in zip(group.positions, out.split(images.shape[0])):
                views[position] = view
        return views

    def __repr__(self) -> str:
        return "\n".join(f"{node.num_crops} x {node}" for node in self.nodes)


class EvalTransform:
    """Resize the shorter side to ``resize_size`` (default ``round(crop_size * 256 / 224)``),
    centre-crop ``crop_size``, normalise: the probes' validation transform (bilinear, antialiased,
    as torchvision's ``Resize`` + ``CenterCrop``)."""

    def __init__(
        self,
        crop_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        resize_size: int | None = None,
    ) -> None:
        self.crop_size = crop_size
        self.resize_size = resize_size or round(crop_size * 256 / 224)
        if self.resize_size < crop_size:
            raise ValueError(f"resize_size {self.resize_size} is smaller than crop {crop_size}")
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        height, width = images.shape[-2:]
        if min(height, width) == self.resize_size == self.crop_size == max(height, width):
            x = ops.to_float(images)
        else:
            x = ops.resize_center_crop(images, self.resize_size, self.crop_size)
        return ops.normalize(x, ops.constant(self.mean, x.device), ops.constant(self.std, x.device))


class ProbeTrainTransform:
    """RandomResizedCrop(scale=(min_scale, 1), bilinear) + horizontal flip + normalise: the probes'
    training transform."""

    def __init__(
        self, crop_size: int, mean: Sequence[float], std: Sequence[float], min_scale: float = 0.08
    ) -> None:
        self.crop_size, self.min_scale = crop_size, min_scale
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        count, device = images.shape[0], images.device
        height, width = images.shape[-2:]
        box = ops.sample_resized_crop_boxes(
            generator, count, height, width, (self.min_scale, 1.0), device
        )
        flip = ops.uniform(generator, count, device) < 0.5
        size = (self.crop_size, self.crop_size)
        x = ops.resized_crop(images, *box, size, flip=flip, interpolation="bilinear")
        return ops.normalize(x, ops.constant(self.mean, device), ops.constant(self.std, device))


class CapturedAugmentation:
    """Replays a CUDA graph of ``transform(images, generator)``, one per input shape (captured on
    its first call, after warm-up calls), so a batch costs one graph launch instead of a few hundred
    kernel launches: at 32 px these dominate the eager time. The batch is copied into the graph's
    input and the outputs are copied out, so results stay valid while later batches run. The
    generator is the graph's and advances with every replay. CPU batches run ``transform`` as is."""

    def __init__(self, transform: Callable, generator: torch.Generator, warmup: int = 3) -> None:
        self.transform, self.generator, self.warmup = transform, generator, warmup
        self._graphs: dict[tuple, tuple] = {}

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None):
        if generator is not None and generator is not self.generator:
            raise ValueError("a captured augmentation draws from the generator it was built with")
        if images.device.type != "cuda":
            return self.transform(images, self.generator)
        key = (tuple(images.shape), images.dtype, images.device)
        if key not in self._graphs:
            self._graphs[key] = self._capture(images)
        graph, static_input, static_output = self._graphs[key]
        static_input.copy_(images)
        graph.replay()
        if isinstance(static_output, torch.Tensor):
            return static_output.clone()
        return [view.clone() for view in static_output]

    def _capture(self, images: torch.Tensor) -> tuple:
        static_input = images.clone()
        side = torch.cuda.Stream(images.device)
        side.wait_stream(torch.cuda.current_stream(images.device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self.transform(static_input, self.generator)
        torch.cuda.current_stream(images.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.generator)
        with torch.cuda.graph(graph):
            static_output = self.transform(static_input, self.generator)
        return graph, static_input, static_output


__all__ = [
    "DATASET_STATS",
    "IMAGENET_STATS",
    "AugmentationNode",
    "CapturedAugmentation",
    "EvalTransform",
    "MultiCropAugmentation",
    "ProbeTrainTransform",
]
