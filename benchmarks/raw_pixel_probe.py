"""Why the ``raw_pixels`` reference row's linear probe reads lower than a plain logistic regression.

The comparison's probe (solo-learn's linear protocol, ``benchmarks/compare/resnet18/linear.yaml``)
trains on random resized crops (area 0.5-1) and horizontal flips, and evaluates on the
``Resize(round(32 * 256 / 224))`` + ``CenterCrop(32)`` view. A learned backbone is built to be
invariant to such shifts and zooms; a linear classifier of the pixels is not. This script trains
the same linear model (SGD 0.1, momentum 0.9, batch 256, cosine, 20 epochs, as the probe) on the
flattened, normalised pixels of a ``solo-diet data`` folder with three training augmentations and
reads it on both evaluation views, for several seeds. The transforms are the probe's own, built
from its YAML as ``solo-diet linear`` builds them (``classification_transforms``), so they follow
the YAML. Runs on a CPU in a few minutes.

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
from omegaconf import OmegaConf
from torch import Tensor
from torchvision.datasets import ImageFolder

from solo_diet.launch.datapaths.image_folder import classification_transforms
from solo_diet.launch.settings import probe_augmentation

PROBE_YAML = Path(__file__).resolve().parent / "compare" / "resnet18" / "linear.yaml"
AUGMENTATIONS = ("none", "flip", "crop+flip")


def transforms(probe_yaml: Path) -> tuple[T.Compose, dict[str, T.Compose], int]:
    """The probe's own training transform, its evaluation view and a plain resize to its crop size
    (same normalisation), and the crop size: what ``solo-diet linear`` applies to custom data."""
    augmentations = OmegaConf.load(probe_yaml).data.augmentations
    probe = probe_augmentation(augmentations, "data.augmentations")
    train, val = classification_transforms("custom", probe)
    size, _, mean, std = probe
    resized = T.Compose([T.Resize((size, size)), T.ToTensor(), T.Normalize(mean, std)])
    return train, {"resized": resized, "probe's": val}, size


def stacked(images: list, transform: T.Compose) -> Tensor:
    return torch.stack([transform(image) for image in images])


def probe(train, val_views, kind: str, seed: int, epochs: int, lr: float) -> dict[str, float]:
    """Top-1 (%) on each evaluation view of the linear probe trained with ``kind``: on the resized
    images, flipped (p = 0.5) or not, or through the probe's training transform."""
    torch.manual_seed(seed)
    images, resized, labels, train_transform = train
    model = torch.nn.Linear(resized[0].numel(), int(labels.max()) + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batch = 256
    steps = epochs * math.ceil(len(labels) / batch)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(epochs):
        order = torch.randperm(len(labels))
        for start in range(0, len(labels), batch):
            rows = order[start : start + batch]
            if kind == "crop+flip":
                x = stacked([images[i] for i in rows], train_transform)
            else:
                x = resized[rows]
            if kind == "flip":
                flip = torch.rand(len(x)) < 0.5
                x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            loss = torch.nn.functional.cross_entropy(model(x.flatten(1)), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    with torch.no_grad():
        return {
            view: 100 * (model(x.flatten(1)).argmax(1) == y).float().mean().item()
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
    parser.add_argument("--probe", type=Path, default=PROBE_YAML, help="the probe's YAML")
    args = parser.parse_args()
    train_transform, views, size = transforms(args.probe)
    train_set, val_set = (ImageFolder(str(args.root / split)) for split in ("train", "val"))
    images = [image for image, _ in train_set]
    train = (
        images,
        stacked(images, views["resized"]),
        torch.tensor(train_set.targets),
        train_transform,
    )
    val_images, val_labels = [image for image, _ in val_set], torch.tensor(val_set.targets)
    val_views = {name: (stacked(val_images, view), val_labels) for name, view in views.items()}
    print(
        f"# linear probe of the raw pixels at {size} px, {args.root}: {len(images)} train / "
        f"{len(val_labels)} val images, transforms of {args.probe}, SGD lr {args.lr}, "
        f"{args.epochs} epochs, seeds {args.seeds}"
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
