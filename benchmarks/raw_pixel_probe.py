"""Why the ``raw_pixels`` reference row's linear probe reads lower than a plain logistic regression.

The comparison's probe (solo-learn's linear protocol, ``benchmarks/compare/resnet18/linear.yaml``)
trains on random resized crops (area 0.5-1) and horizontal flips, and evaluates on the
``Resize(round(32 * 256 / 224))`` + ``CenterCrop(32)`` view. A learned backbone is built to be
invariant to such shifts and zooms; a linear classifier of the pixels is not. This script trains
the same linear model (SGD 0.1, momentum 0.9, batch 256, cosine, 20 epochs, as the probe) on the
flattened, normalised pixels of a ``solo-diet data`` folder with three training augmentations and
reads it on both evaluation views, for several seeds. Runs on a CPU in a few minutes.

    solo-diet data animal-mnist /tmp/am
    python benchmarks/raw_pixel_probe.py /tmp/am               # 3 seeds
    python benchmarks/raw_pixel_probe.py /tmp/am --seeds 0 --epochs 2   # a quick look
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import torch
import torchvision.transforms as T
from torch import Tensor
from torchvision.datasets import ImageFolder

SIZE = 32
AUGMENTATIONS = ("none", "flip", "crop+flip")
EVAL_VIEWS = {
    "resized": T.Resize((SIZE, SIZE), antialias=True),
    "probe's (resize 37, center crop 32)": T.Compose(
        [T.Resize(round(SIZE * 256 / 224), antialias=True), T.CenterCrop(SIZE)]
    ),
}


def load(folder: Path) -> tuple[Tensor, Tensor]:
    """Every image of an ImageFolder as (N, 3, H, W) floats in [0, 1], and its labels."""
    dataset = ImageFolder(str(folder), T.Compose([T.Grayscale(3), T.ToTensor()]))
    images = torch.stack([dataset[i][0] for i in range(len(dataset))])
    return images, torch.tensor(dataset.targets)


def augment(images: Tensor, kind: str, crop: T.RandomResizedCrop) -> Tensor:
    """A training batch at 32 px: resized, flipped (p = 0.5) and/or randomly cropped."""
    if kind == "crop+flip":
        images = torch.stack([crop(image) for image in images])
    else:
        images = EVAL_VIEWS["resized"](images)
    if kind in ("flip", "crop+flip"):
        flip = torch.rand(len(images)) < 0.5
        images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    return images


def probe(train, val_views, kind: str, seed: int, epochs: int, lr: float) -> dict[str, float]:
    """Top-1 (%) on each evaluation view of the linear probe trained with ``kind``."""
    torch.manual_seed(seed)
    (images, labels), (mean, std) = train, (train[0].mean(), train[0].std())
    crop = T.RandomResizedCrop(SIZE, scale=(0.5, 1.0), antialias=True)
    model = torch.nn.Linear(3 * SIZE * SIZE, int(labels.max()) + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batch = 256
    steps = epochs * math.ceil(len(images) / batch)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(epochs):
        order = torch.randperm(len(images))
        for start in range(0, len(images), batch):
            rows = order[start : start + batch]
            x = (augment(images[rows], kind, crop) - mean) / std
            loss = torch.nn.functional.cross_entropy(model(x.flatten(1)), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    with torch.no_grad():
        return {
            view: 100 * (model(((x - mean) / std).flatten(1)).argmax(1) == y).float().mean().item()
            for view, (x, y) in val_views.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path, help="a folder written by `solo-diet data`")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    train = load(args.root / "train")
    val_images, val_labels = load(args.root / "val")
    val_views = {name: (view(val_images), val_labels) for name, view in EVAL_VIEWS.items()}
    print(
        f"# linear probe of the raw pixels, {args.root}: {len(train[1])} train / "
        f"{len(val_labels)} val images, SGD lr {args.lr}, {args.epochs} epochs, seeds {args.seeds}"
    )
    print(
        "| training augmentation | "
        + " | ".join(f"top-1 on the {v} view" for v in val_views)
        + " |"
    )
    print("|---|" + "---:|" * len(val_views))
    for kind in AUGMENTATIONS:
        runs = [probe(train, val_views, kind, s, args.epochs, args.lr) for s in args.seeds]
        cells = []
        for view in val_views:
            values = [run[view] for run in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.2f} ± {spread:.2f}")
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
