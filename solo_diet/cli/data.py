"""``solo-diet data``: registry datasets written as solo-learn ``custom`` ImageFolders."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import struct
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from solo_diet.core.errors import ConfigError
from solo_diet.launch.errors import DataError, check_destination

ANIMAL_CLASSES = "bear bird cat cow dog elephant giraffe horse sheep zebra".split()
FASHION_CLASSES = "tshirt trouser pullover dress coat sandal shirt sneaker bag boot".split()
FASHION_DIRS = ("/usr/share/datasets/fashion-mnist",)

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def stratified_split(
    labels: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val) with ``val_fraction`` of every class in val, shuffled by ``seed``."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        cut = int(round(len(members) * val_fraction))
        val.append(members[:cut])
        train.append(members[cut:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def load_animal_mnist() -> Split:
    try:
        import animal_mnist
    except ImportError as err:
        raise DataError(
            "animal-mnist is not installed: `pip install --no-deps animal-mnist==0.4`."
        ) from err
    folder = Path(animal_mnist.__file__).parent / "data" / "Animal_MNIST"
    with gzip.open(folder / "animal_data_version_3.gz", "rb") as f:
        images = np.asarray(pickle.load(f), dtype=np.uint8)
    with gzip.open(folder / "animal_label_version_3.gz", "rb") as f:
        labels = np.asarray(pickle.load(f), dtype=np.int64)
    train, val = stratified_split(labels, 0.2, seed=0)
    return images[train], labels[train], images[val], labels[val]


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX (MNIST format) file, gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(dirs: tuple[str, ...] = FASHION_DIRS) -> Split:
    folder = next((Path(d) for d in dirs if os.path.isdir(d)), None)
    names = ("train-images", "train-labels", "t10k-images", "t10k-labels")
    files = [min(folder.glob(f"{n}*"), default=None) for n in names] if folder else [None]
    if None in files:
        raise DataError(
            f"Fashion-MNIST's four IDX files not found in {dirs}: "
            "`apt-get install dataset-fashion-mnist`."
        )
    x_train, y_train, x_val, y_val = (read_idx(f) for f in files)
    return x_train, y_train.astype(np.int64), x_val, y_val.astype(np.int64)


DATASETS: dict[str, tuple[Callable[[], Split], list[str]]] = {
    "animal-mnist": (load_animal_mnist, ANIMAL_CLASSES),
    "fashion-mnist": (load_fashion_mnist, FASHION_CLASSES),
}


def _write_split(root: Path, images: np.ndarray, labels: np.ndarray, classes: list[str]) -> None:
    from PIL import Image

    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        Image.fromarray(image).save(root / classes[label] / f"{i:06d}.png")


def _clear_earlier_write(root: Path) -> None:
    """Remove the ``train/`` and ``val/`` an earlier write of ours left; refuse others'."""
    splits = [root / split for split in ("train", "val") if (root / split).exists()]
    if not splits:
        return
    ours = (root / ".complete").exists() or (root / ".writing").exists()
    if not ours:
        raise DataError(
            f"{root} already holds {' and '.join(s.name + '/' for s in splits)} that `solo-diet "
            "data` did not write: choose an empty or new directory, or delete them."
        )
    for split in splits:
        shutil.rmtree(split)


def _limited(labels: np.ndarray, limit: int, classes: list[str]) -> np.ndarray:
    """The training images ``--limit`` keeps (stratified); refused if a class gets none."""

    def kept(count: int) -> np.ndarray:
        return stratified_split(labels, 1 - min(1.0, count / len(labels)), seed=0)[0]

    keep = kept(limit)
    missing = len(classes) - len(np.unique(labels[keep]))
    if missing:
        needed = next(
            n
            for n in range(limit + 1, len(labels) + 1)
            if len(np.unique(labels[kept(n)])) == len(classes)
        )
        raise ConfigError(
            f"--limit {limit} leaves {missing} of the {len(classes)} classes without a training "
            f"image: pass --limit {needed} or more."
        )
    return keep


def write_dataset(name: str, directory: str, limit: Optional[int] = None) -> Path:
    """Write dataset ``name`` under ``directory`` (a complete same write is reused)."""
    if limit is not None and limit <= 0:
        raise ConfigError(f"--limit must be a positive number of images, got {limit}.")
    check_destination(directory, "DIR")
    root = Path(directory).expanduser().resolve()
    marker, writing = root / ".complete", root / ".writing"
    if marker.exists() and marker.read_text() == f"{name} {limit}":
        return root
    loader, classes = DATASETS[name]
    x_train, y_train, x_val, y_val = loader()  # first: a failed load leaves no folder behind
    if limit is not None:
        keep = _limited(y_train, limit, classes)
        x_train, y_train = x_train[keep], y_train[keep]
    _clear_earlier_write(root)
    root.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    writing.write_text(f"{name} {limit}")
    _write_split(root / "train", x_train, y_train, classes)
    _write_split(root / "val", x_val, y_val, classes)
    marker.write_text(f"{name} {limit}")
    writing.unlink()
    return root
