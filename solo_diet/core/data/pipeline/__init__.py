"""solo-learn's augmentation nodes as batched GPU pipelines (docs/gpu-augmentations.md): the
multi-view pipeline, the probes' transforms, :class:`CapturedAugmentation` (nodes: ``nodes``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from solo_diet.core.data import augment as ops
from solo_diet.core.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.core.errors import Argument, ArgumentError

_COLUMNS = (
    "crop_min_scale", "crop_max_scale", "jitter_prob", "grayscale_prob", "blur_prob",
    "solarization_prob", "equalization_prob", "flip_prob", "erasing_prob",
)  # fmt: skip


class _ViewGroup:
    """The views of one output shape, transformed together as one batch."""

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

    def __call__(self, images: ops.Images, generator: torch.Generator | None) -> torch.Tensor:
        batch, device = len(images), images[0].device
        params = self.table(device).repeat_interleave(batch, 0)
        count = params.shape[0]
        scale = params[:, 0], params[:, 1]
        coins = (
            ops.uniform(generator, (count, len(_COLUMNS) - 2), device)
            < params[:, 2 : len(_COLUMNS)]
        )
        # each op's coins, None where no view of the group applies the op
        chance = {n: c if self.active[n] else None for n, c in zip(_COLUMNS[2:], coins.unbind(1))}
        flip = chance["flip_prob"]
        if self.rrc:
            height, width = ops.image_sides(images, count)
            box = ops.sample_resized_crop_boxes(generator, count, height, width, scale, device)
            size = (self.crop_size, self.crop_size)
            x = ops.resized_crop(images, *box, size, flip=flip, interpolation="bicubic")
        elif not isinstance(images, torch.Tensor):  # sizes differ: a square centre crop each
            rows = torch.zeros(count, dtype=torch.bool, device=device) if flip is None else flip
            x = ops.resize_center_crop(images, self.crop_size, self.crop_size, rows, "bicubic")
        else:
            repeated = images.repeat(len(self.nodes), 1, 1, 1)
            x = ops.resize_center_crop(repeated, self.crop_size, None, flip, "bicubic")
        if self.active["jitter_prob"]:
            x = self._jitter(x, params[:, len(_COLUMNS) :], chance["jitter_prob"], generator)
        if self.active["grayscale_prob"]:
            x = ops.grayscale(x, chance["grayscale_prob"])
        if self.active["blur_prob"]:
            sigma = ops.uniform(generator, count, device, *ops.BLUR_SIGMA)
            radius = min(math.ceil(3 * ops.BLUR_SIGMA[1]), min(x.shape[-2:]) - 1)
            x = ops.gaussian_blur(x, sigma, radius, chance["blur_prob"])
        if self.active["solarization_prob"]:
            x = ops.solarize(x, chance["solarization_prob"])
        if self.active["equalization_prob"]:
            x = ops.equalize(x, chance["equalization_prob"])
        stats = params[:, len(_COLUMNS) + 8 :]
        x = ops.normalize(x, stats[:, :3], stats[:, 3:])
        if self.active["erasing_prob"]:
            box, found = ops.sample_erasing_boxes(generator, count, *x.shape[-2:], device)
            x = ops.erase(x, box, found & chance["erasing_prob"])
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
    """solo-learn's multi-view pipeline: ``num_crops`` normalised float32 views per node."""

    def __init__(self, nodes: Sequence[AugmentationNode]) -> None:
        if not nodes:
            raise ArgumentError(Argument("nodes"), " must list at least one augmentation node.")
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
        """The pipeline of solo-learn's augmentation nodes for ``dataset``."""
        named = [(node, f"nodes[{index}]") for index, node in enumerate(nodes)]
        return cls([AugmentationNode.from_config(n, dataset, name=name) for n, name in named])

    def __call__(
        self, images: ops.Images, generator: torch.Generator | None = None
    ) -> list[torch.Tensor]:
        """``num_views`` float32 views of a batch (or of a list of images of different sizes)."""
        views: list[torch.Tensor | None] = [None] * self.num_views
        for group in self._groups:
            out = group(images, generator)
            for position, view in zip(group.positions, out.split(len(images))):
                views[position] = view
        return views

    def __repr__(self) -> str:
        return "\n".join(f"{node.num_crops} x {node}" for node in self.nodes)


class EvalTransform:
    """The probes' validation transform: resize, centre-crop ``crop_size``, normalise."""

    def __init__(
        self,
        crop_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        resize_size: int | None = None,
    ) -> None:
        self.crop_size = crop_size
        self.resize_size = resize_size or round(crop_size * 256 / 224)
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: ops.Images, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A (B, C, H, W) batch, or a list of B images of different sizes."""
        height, width = ops.image_sides(images, len(images))
        if isinstance(height, int) and height == width == self.resize_size == self.crop_size:
            x = ops.to_float(images)
        else:
            x = ops.resize_center_crop(images, self.resize_size, self.crop_size)
        return ops.normalize(x, ops.constant(self.mean, x.device), ops.constant(self.std, x.device))


class ProbeTrainTransform:
    """The probes' training transform: RandomResizedCrop, horizontal flip, normalise."""

    def __init__(
        self, crop_size: int, mean: Sequence[float], std: Sequence[float], min_scale: float = 0.08
    ) -> None:
        self.crop_size, self.min_scale = crop_size, min_scale
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: ops.Images, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A (B, C, H, W) batch, or a list of B images of different sizes."""
        count, device = len(images), images[0].device
        height, width = ops.image_sides(images, count)
        box = ops.sample_resized_crop_boxes(
            generator, count, height, width, (self.min_scale, 1.0), device
        )
        flip = ops.uniform(generator, count, device) < 0.5
        size = (self.crop_size, self.crop_size)
        x = ops.resized_crop(images, *box, size, flip=flip, interpolation="bilinear")
        return ops.normalize(x, ops.constant(self.mean, device), ops.constant(self.std, device))


class CapturedAugmentation:
    """Replays a CUDA graph of ``transform(images, generator)`` per input shape."""

    def __init__(self, transform: Callable, generator: torch.Generator, warmup: int = 3) -> None:
        self.transform, self.generator, self.warmup = transform, generator, warmup
        self._graphs: dict[tuple, tuple] = {}

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None):
        if generator is not None and generator is not self.generator:
            raise ValueError("a captured augmentation draws from the generator it was built with")
        if images.device.type != "cuda":
            return self.transform(images, self.generator)
        key = (tuple(images.shape), images.dtype, images.device, torch.is_inference_mode_enabled())
        if key not in self._graphs:
            self._graphs[key] = self._capture(images)
        graph, static_input, static_output = self._graphs[key]
        static_input.copy_(images)
        graph.replay()
        if isinstance(static_output, torch.Tensor):
            return static_output.clone()
        return [view.clone() for view in static_output]

    def _capture(self, images: torch.Tensor) -> tuple:
        device = images.device
        state = self.generator.get_state()  # the warm-up calls advance it; restored below
        static_input = images.clone()
        with torch.cuda.device(device):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self.transform(static_input, self.generator)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(self.generator)
            # thread_local: other threads (a pinned loader's copier) may use CUDA meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_output = self.transform(static_input, self.generator)
        self.generator.set_state(state)
        return graph, static_input, static_output
