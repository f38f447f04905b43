"""The torch-only core names its own arguments in its errors; the launchers' settings name the
config keys that set them (:func:`~solo_diet.core.settings.core_errors_named`). Each case: the
core's error as the launcher shows it, one line naming the key and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from solo_diet.core.data.loader import GPUBatchLoader
from solo_diet.core.data.pipeline import MultiCropAugmentation
from solo_diet.core.data.stream import CorruptImage, EncodedFiles, StreamLoader
from solo_diet.core.data.tensor_data import ImageTensors, check_host_memory, load_images
from solo_diet.core.errors import Argument, ConfigError
from solo_diet.core.settings import core_errors_named
from solo_diet.launch.datapaths.gpu import GPUPath
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    DataSettings,
    GPUDataSettings,
    LoaderSettings,
)
from tests._helpers.core import BAD_NODES


def write_folder(root: Path, sizes=((8, 8), (8, 8))) -> Path:
    """One class folder of random PNGs of ``sizes`` (width, height)."""
    rng = np.random.default_rng(0)
    (root / "class_0").mkdir(parents=True)
    for i, (width, height) in enumerate(sizes):
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "class_0" / f"{i}.png")
    return root


def named(call) -> ValueError:
    """The error ``call()`` raises, as the launcher names it."""
    with pytest.raises(ValueError) as raised, core_errors_named(GPU_ARGUMENT_KEYS):
        call()
    return raised.value


def test_decoding_errors_name_the_data_keys(tmp_path):
    folder = write_folder(tmp_path / "same")
    cases = [
        (lambda: load_images("custom", folder, "pretrain", fraction=1.0), r"^`data.fraction` must"),
        (
            lambda: load_images("cifar100", tmp_path, "pretrain", fraction=0.5),
            r"^`data.fraction` selects part of an ImageFolder; solo-learn has none for cifar100",
        ),
        (
            lambda: load_images("mnist", tmp_path, "pretrain"),
            r"^`data.dataset: mnist` has no GPU data path; choose one of",
        ),
        (
            lambda: load_images("custom", folder, "pretrain", image_size=0),
            r"^`data.gpu.image_size` must be a positive integer or null, got 0\.$",
        ),
        (
            lambda: EncodedFiles.from_folder("cifar10", folder, "pretrain"),
            r"^`data.dataset: cifar10` is not an image folder.* \(use `data.gpu.storage: auto`\)",
        ),
    ]
    for call, message in cases:
        error = named(call)
        assert type(error) is ConfigError and re.search(message, str(error)), str(error)
    mixed = write_folder(tmp_path / "mixed", sizes=((8, 8), (12, 8)))
    error = named(lambda: load_images("custom", mixed, "train"))
    assert type(error) is ConfigError
    assert re.search(r"is 12x8 px but .* is 8x8 px: .* Set `data.gpu.image_size` \(", str(error))
    error = named(
        lambda: check_host_memory(2**60, "decoding", "Set a smaller ", Argument("image_size"), ".")
    )
    assert str(error).endswith("are available. Set a smaller `data.gpu.image_size`.")


def test_the_gpu_path_names_the_splits_path_key(tmp_path):
    run = LoaderSettings(dataset="custom", train_path=str(write_folder(tmp_path / "train")))
    path = GPUPath(DataSettings("gpu", GPUDataSettings(device="cpu", decode_cache=False)))
    assert len(path.load_split(run, "train")) == 2
    with pytest.raises(ConfigError, match=r"^`data.val_path` must be the path of the val set, got"):
        path.load_split(run, "val")
    with pytest.raises(ConfigError, match=r"^`data.fraction` must be in \(0, 1\)"):
        path.load_split(run, "train", fraction=2.0)


@pytest.mark.parametrize("change, argument", BAD_NODES)
def test_augmentation_errors_name_the_augmentations_key(change, argument):
    nodes = [{"crop_size": 32}, {"crop_size": 32, **change}]
    key = argument.replace("nodes[", "augmentations[", 1)
    error = named(lambda: MultiCropAugmentation.from_config(nodes, "cifar10"))
    assert type(error) is ConfigError and str(error).startswith(f"`{key}`"), str(error)


def test_augmentation_dataset_and_list_errors_name_their_keys():
    error = named(lambda: MultiCropAugmentation.from_config([{}], "cifar11"))
    assert str(error).startswith("`data.dataset` must be one of")
    assert str(named(lambda: MultiCropAugmentation.from_config([], "cifar10"))).startswith(
        "`augmentations` must list at least one augmentation node."
    )
    error = named(lambda: MultiCropAugmentation.from_config([{}, {"mean": [0.5] * 3}], "cifar10"))
    assert re.match(
        r"`augmentations\[1\].mean` is ignored by solo-learn for `data.dataset: cifar10` .*; "
        r"remove it, or use `data.dataset: custom` to set your own\.",
        str(error),
    )


def _stream(files: EncodedFiles, **kwargs) -> StreamLoader:
    augment = MultiCropAugmentation.from_config([{"crop_size": 8}], "custom")
    return StreamLoader.for_pretraining(files, 2, augment, device="cpu", **kwargs)


def test_stream_errors_name_the_keys_and_keep_their_type(tmp_path):
    files = EncodedFiles.from_folder("custom", write_folder(tmp_path / "f"), "pretrain")
    error = named(lambda: _stream(files, on_corrupt="ignore"))
    assert str(error).startswith("`data.gpu.on_corrupt` must be one of ['stop', 'skip']")
    error = named(lambda: _stream(files, num_workers=-1))
    assert str(error).startswith("`data.num_workers` must be an integer >= 0, got -1.")
    stream = _stream(files, num_workers=0)
    error = named(lambda: stream._corrupt({0: "bad bytes"}, torch.tensor([1, 0])))
    assert type(error) is CorruptImage  # still the run-stopping data error, now naming the key
    assert re.search(
        r"^cannot decode .*1\.png \(bad bytes\): .*`data.gpu.on_corrupt: skip`", str(error)
    )


def test_a_set_too_large_for_the_device_names_storage_and_image_size(monkeypatch):
    """The late placement check (run when the loader is first iterated, inside the fit that
    :func:`~solo_diet.launch.common.fit_or_raise` wraps); the free memory is made to be none."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (0, 0))
    images = ImageTensors(torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.zeros(4).long())
    loader = GPUBatchLoader.for_pretraining(images, 2, lambda x, g: [x], storage="device")
    error = named(lambda: loader.placement(torch.device("cuda", 0)))
    assert type(error) is ConfigError
    assert re.search(
        r"does not fit in the 0.00 GiB free on cuda:0: set `data.gpu.storage: pinned` \(or auto\), "
        r"or a smaller `data.gpu.image_size` when decoding\.$",
        str(error),
    )


def test_other_errors_and_unknown_arguments_pass_unchanged():
    with pytest.raises(ValueError, match="^argument `elsewhere` is bad$") as raised:
        with core_errors_named(GPU_ARGUMENT_KEYS):
            raise ValueError("argument `elsewhere` is bad")
    assert type(raised.value) is ValueError
    with pytest.raises(KeyError), core_errors_named(GPU_ARGUMENT_KEYS):
        raise KeyError("argument `storage`")


def test_a_renamed_error_keeps_the_cores_traceback_and_an_index_error_its_type():
    import traceback

    from solo_diet.core.labels import LabelSource

    error = named(lambda: load_images("cifar100", "/nowhere", "train", fraction=0.5))
    frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert type(error) is ConfigError and frames[-1] == "load_torchvision"  # for --debug
    source = LabelSource("class", num_samples=4, num_classes=3)
    with pytest.raises(IndexError, match=r"target 3 .*\(`data.num_classes` = 3\)"):
        with core_errors_named({"num_classes": "data.num_classes"}):
            source(torch.arange(2), torch.tensor([0, 3]))
