"""Throughput of our batched augmentation ops against kornia's, per op and for whole pipelines.

One table: samples/s (median over ``--repeats`` timed calls after ``--warmup`` calls, CUDA events on
a GPU) for each op at 32 px and for solo-learn's 2-view BYOL/asymmetric pipeline (RRC, colour jitter
with hue, grayscale, blur, solarization, flip, normalisation) at 32 px (CIFAR), 96 px (STL-10) and
224 px (from 256 px images). Both sides sample their parameters in the timed call; our ops take the
uint8 batch, kornia takes it converted to float (the conversion is timed in the pipeline rows). The
"alt" row is the same crop + flip as an affine bicubic ``grid_sample`` (a = -0.75, no antialiasing),
the resampling we did not choose. "ours, CUDA graph" replays the pipeline as one CUDA graph
(``CapturedAugmentation``). On CUDA the script also checks that our pipeline makes no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")``) and that graph replays draw new
parameters.

    python benchmarks/gpu_augment.py                       # on a GPU
    python benchmarks/gpu_augment.py --device cpu --repeats 2   # smoke (batch 16)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from solo_diet.core.data import augment as ops
from solo_diet.core.data.pipeline import CapturedAugmentation, MultiCropAugmentation

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
JITTER = {"prob": 0.8, "brightness": 0.4, "contrast": 0.4, "saturation": 0.2, "hue": 0.1}


def asymmetric_nodes(crop_size: int) -> list:
    """solo-learn's asymmetric (BYOL) augmentation YAML at ``crop_size``."""
    common = {
        "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
        "color_jitter": JITTER,
        "grayscale": {"prob": 0.2},
        "equalization": {"prob": 0.0},
        "horizontal_flip": {"prob": 0.5},
        "crop_size": crop_size,
        "num_crops": 1,
    }
    return [
        {**common, "gaussian_blur": {"prob": 1.0}, "solarization": {"prob": 0.0}},
        {**common, "gaussian_blur": {"prob": 0.1}, "solarization": {"prob": 0.2}},
    ]


def kornia_view(crop_size: int, blur: float, solarize: float, device) -> torch.nn.Module:
    import kornia.augmentation as K

    return torch.nn.Sequential(
        K.RandomResizedCrop((crop_size, crop_size), scale=(0.08, 1.0), resample="BICUBIC"),
        K.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8),
        K.RandomGrayscale(p=0.2),
        K.RandomGaussianBlur((13, 13), (0.1, 2.0), p=blur),
        K.RandomSolarize(0.0, 0.0, p=solarize),
        K.RandomHorizontalFlip(p=0.5),
        K.Normalize(torch.tensor(CIFAR_MEAN), torch.tensor(CIFAR_STD)),
    ).to(device)


def grid_sample_crop(images: torch.Tensor, generator, size: int) -> torch.Tensor:
    """The alternative resampling: crop + flip as one affine bicubic ``grid_sample``."""
    count, _, height, width = images.shape
    top, left, crop_h, crop_w = ops.sample_resized_crop_boxes(
        generator, count, height, width, (0.08, 1.0), images.device
    )
    sign = torch.where(ops.uniform(generator, count, images.device) < 0.5, -1.0, 1.0)
    theta = torch.zeros(count, 2, 3, device=images.device)
    theta[:, 0, 0] = sign * crop_w / width
    theta[:, 0, 2] = (2 * left + crop_w) / width - 1
    theta[:, 1, 1] = crop_h / height
    theta[:, 1, 2] = (2 * top + crop_h) / height - 1
    grid = F.affine_grid(theta, [count, 3, size, size], align_corners=False)
    out = F.grid_sample(images.float() / 255, grid, "bicubic", "border", align_corners=False)
    return out.clamp_(0, 1)


def median_seconds(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
    return statistics.median(times)


def op_cases(batch: int, device, generator):
    """(name, ours, kornia) at 32 px; ours draws per-sample parameters from ``generator``."""
    import kornia.augmentation as K

    images = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, device=device)
    x = images.float() / 255
    n = batch

    def draw(low=0.0, high=1.0):
        return ops.uniform(generator, n, device, low, high)

    def crop():
        box = ops.sample_resized_crop_boxes(generator, n, 32, 32, (0.08, 1.0), device)
        return ops.resized_crop(images, *box, (32, 32), flip=draw() < 0.5)

    def jitter():
        factors = ops.uniform(
            generator,
            (n, 3),
            device,
            torch.tensor([0.6, 0.6, 0.8], device=device),
            torch.tensor([1.4, 1.4, 1.2], device=device),
        )
        order = ops.sample_order(generator, n, 4, device)
        return ops.color_jitter(x, factors, draw(-0.1, 0.1), order)

    def blur():
        return ops.gaussian_blur(x, draw(0.1, 2.0), 6, draw() < 0.5)

    def erase():
        box, found = ops.sample_erasing_boxes(generator, n, 32, 32, device)
        return ops.erase(x, box, found & (draw() < 0.5))

    mean, std = torch.tensor(CIFAR_MEAN, device=device), torch.tensor(CIFAR_STD, device=device)

    def kx(module):
        return lambda: module.to(device)(x)

    return [
        ("rrc + flip", crop, kx(torch.nn.Sequential(
            K.RandomResizedCrop((32, 32), resample="BICUBIC"), K.RandomHorizontalFlip()))),
        ("alt: rrc + flip as grid_sample", lambda: grid_sample_crop(images, generator, 32), None),
        ("colour jitter (with hue)", jitter, kx(K.ColorJitter(0.4, 0.4, 0.2, 0.1, p=1.0))),
        ("grayscale", lambda: ops.grayscale(x, draw() < 0.2), kx(K.RandomGrayscale(p=0.2))),
        ("gaussian blur", blur, kx(K.RandomGaussianBlur((13, 13), (0.1, 2.0), p=0.5))),
        ("solarization", lambda: ops.solarize(x, draw() < 0.2), kx(K.RandomSolarize(0, 0, p=0.2))),
        ("equalization", lambda: ops.equalize(x, draw() < 0.5), kx(K.RandomEqualize(p=0.5))),
        ("normalisation", lambda: ops.normalize(x, mean, std), kx(K.Normalize(mean, std))),
        ("random erasing", erase, kx(K.RandomErasing(p=0.5))),
    ]  # fmt: skip


def pipeline_case(batch: int, crop_size: int, source: int, device, generator):
    """(name, ours, ours as a CUDA graph (None on the CPU), kornia) for the 2-view pipeline."""
    images = torch.randint(0, 256, (batch, 3, source, source), dtype=torch.uint8, device=device)
    ours = MultiCropAugmentation.from_config(asymmetric_nodes(crop_size), "cifar10")
    captured = CapturedAugmentation(ours, generator) if device.type == "cuda" else None
    views = [kornia_view(crop_size, 1.0, 0.0, device), kornia_view(crop_size, 0.1, 0.2, device)]

    def kornia_pipeline():
        x = images.float() / 255
        return [view(x) for view in views]

    name = f"2-view asymmetric pipeline {crop_size} px (from {source} px)"
    graphed = None if captured is None else (lambda: captured(images))
    return name, lambda: ours(images, generator), graphed, kornia_pipeline


def check_no_sync(fn: Callable[[], object]) -> str:
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as error:
        return f"HOST SYNC: {str(error).splitlines()[0]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, help="default: 256 on a GPU, 16 on the CPU")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, help="default: 10 on a GPU, 1 on the CPU")
    args = parser.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    args.batch = args.batch or (256 if on_gpu else 16)
    args.warmup = args.warmup if args.warmup is not None else (10 if on_gpu else 1)
    generator = torch.Generator(device=device).manual_seed(0)
    cases = [
        (name, ours, None, kornia) for name, ours, kornia in op_cases(args.batch, device, generator)
    ]
    for crop, source in ((32, 32), (96, 96), (224, 256)):
        cases.append(pipeline_case(args.batch, crop, source, device, generator))
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    print(f"device: {name}, batch {args.batch}, median of {args.repeats} calls, "
          f"torch {torch.__version__}; samples/s (pipelines: images/s, 2 views each)")  # fmt: skip
    print("| case | ours | ours, CUDA graph | kornia | ours / kornia | graph / kornia |")
    print("|---|---:|---:|---:|---:|---:|")

    def rate(fn) -> float:
        if fn is None:
            return math.nan
        return args.batch / median_seconds(fn, device, args.warmup, args.repeats)

    def text(value: float, ratio: bool = False) -> str:
        if math.isnan(value):
            return "-"
        return f"{value:.1f}x" if ratio else f"{value:,.0f}"

    for case, ours, graphed, kornia in cases:
        eager, graph, other = rate(ours), rate(graphed), rate(kornia)
        cells = [text(eager), text(graph), text(other), text(eager / other, True)]
        print(f"| {case} | " + " | ".join(cells + [text(graph / other, True)]) + " |")
    if on_gpu:
        print(f"host syncs in our 32 px pipeline: {check_no_sync(cases[-3][1])}")
        first, second = cases[-3][2](), cases[-3][2]()
        print(f"CUDA graph replays draw new parameters: {not torch.equal(first[0], second[0])}")


if __name__ == "__main__":
    main()
