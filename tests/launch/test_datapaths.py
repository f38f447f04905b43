"""One data path per data format, chosen once by the factory; only the settings parser and the
factory read the format key; the image-folder and GPU paths give compare's evaluation the same
images in the same order."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from solo_diet.launch import datapaths
from solo_diet.launch.datapaths import (
    DataPath,
    make_data_path,
    parse_data_settings,
)
from solo_diet.launch.datapaths.base import REGISTRY, PretrainData, ViewRequest
from solo_diet.launch.datapaths.gpu import GPUPath
from solo_diet.launch.datapaths.image_folder import DaliPath, ImageFolderPath
from solo_diet.launch.settings import DataSettings, GPUDataSettings, parse_loader_settings
from tests._helpers import requires_solo

PACKAGE = Path(__file__).resolve().parents[2] / "solo_diet"
# the only modules that read the data format: the settings parsers (the launch's; compare's spec
# parser, where compare's format choice lives) and the data-path factory; and the two that record
# compare's parsed value without branching on it (the report's data line, the evaluation
# fingerprint)
FORMAT_READERS = {
    "core/settings.py",  # where the key is declared (FORMAT_KEY)
    "launch/settings.py",
    "launch/datapaths/__init__.py",
    "compare/spec/load.py",
    "compare/report/markdown.py",
    "compare/plan/jobs.py",
}
INTERFACE = (
    "pretrain_data",
    "classification_val_loader",
    "linear_loaders",
    "feature_loaders",
    "lidar_views",
)


@pytest.mark.parametrize(
    "fmt, cls, solo_format",
    [
        ("image_folder", ImageFolderPath, "image_folder"),
        ("h5", ImageFolderPath, "h5"),
        ("dali", DaliPath, "image_folder"),
        ("gpu", GPUPath, None),
    ],
)
def test_the_factory_picks_the_formats_class(fmt, cls, solo_format):
    gpu = GPUDataSettings(device="cpu") if fmt == "gpu" else None
    path = make_data_path(DataSettings(fmt, gpu))
    assert type(path) is cls and path.settings.format == fmt
    assert getattr(path, "solo_format", None) == solo_format


def test_the_stream_storage_gets_the_streaming_path():
    from solo_diet.launch.datapaths.gpu import StreamPath

    stream = GPUDataSettings(storage="stream", device="cpu")
    assert type(make_data_path(DataSettings("gpu", stream))) is StreamPath
    cfg = OmegaConf.create({"accelerator": "cpu", "data": {"format": "gpu", "gpu": {}}})
    cfg.data.gpu.storage = "stream"
    path = make_data_path(parse_data_settings(cfg))
    assert type(path) is StreamPath and path.loaders == []
    path.close()  # no loader made yet: nothing to stop
    make_data_path(DataSettings()).close()  # the default: nothing to release


def test_data_settings_parsed_once_choose_the_data_path():
    cfg = OmegaConf.create({"accelerator": "cpu", "data": {"format": "gpu"}})
    path = make_data_path(parse_data_settings(cfg))
    assert isinstance(path, GPUPath) and path.gpu.device == "cpu"
    empty = OmegaConf.create({"data": {}})
    assert isinstance(make_data_path(parse_data_settings(empty)), ImageFolderPath)


def test_every_format_has_the_whole_interface_in_the_listed_order():
    assert tuple(REGISTRY) == ("image_folder", "h5", "dali", "gpu")
    for fmt, cls in REGISTRY.items():
        missing = [name for name in INTERFACE if getattr(cls, name) is getattr(DataPath, name)]
        assert not missing, f"{fmt}: {cls.__name__} lacks {missing}"


def test_every_module_of_the_package_is_imported_so_a_new_format_is_one_new_file():
    names = {m.name for m in pkgutil.iter_modules(datapaths.__path__)}
    assert {"base", "image_folder", "gpu"} <= names
    assert all(f"{datapaths.__name__}.{name}" in sys.modules for name in names)
    importlib.reload(datapaths)  # the registry stays as the modules define it
    assert tuple(REGISTRY) == ("image_folder", "h5", "dali", "gpu")


def test_a_subclass_with_formats_registers_itself():
    class Streaming(GPUPath):
        formats = ("streaming_test",)

    try:
        assert type(make_data_path(DataSettings("streaming_test"))) is Streaming
        assert tuple(REGISTRY)[-1] == "streaming_test"
        cfg = OmegaConf.create({"accelerator": "cpu", "data": {"format": "streaming_test"}})
        # the settings accept it and read its keys through its class
        chosen = make_data_path(parse_data_settings(cfg))
        assert type(chosen) is Streaming and chosen.gpu.device == "cpu"
    finally:
        del REGISTRY["streaming_test"]


def test_pretrain_data_default_hands_loaders_to_fit_and_dali_its_datamodule():
    class Module:
        pass

    train = PretrainData("loader", 4)
    assert make_data_path(DataSettings()).fit_kwargs(train, "val") == {
        "train_dataloaders": "loader",
        "val_dataloaders": "val",
    }
    module = Module()
    kwargs = make_data_path(DataSettings("dali")).fit_kwargs(PretrainData(module, 4), "val")
    assert kwargs == {"datamodule": module} and module.val_dataloader() == "val"


def _format_reads(path: Path) -> list[str]:
    """Where ``path`` reads the format key: the text ``data.format`` anywhere (a key, a message,
    a docstring) or an attribute ``<x>.data.format``."""
    text = path.read_text()
    found = [f"line {n}" for n, line in enumerate(text.splitlines(), 1) if "data.format" in line]
    for node in ast.walk(ast.parse(text)):
        value = getattr(node, "value", None)
        if isinstance(node, ast.Attribute) and node.attr == "format":
            if isinstance(value, ast.Attribute) and value.attr == "data":
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_settings_parser_and_the_factory_read_the_format_key():
    reads = {
        str(path.relative_to(PACKAGE)): _format_reads(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in FORMAT_READERS
    }
    assert not {name: lines for name, lines in reads.items() if lines}
    assert _format_reads(PACKAGE / "core" / "settings.py")  # the test sees a read


@requires_solo()
def test_image_folder_and_gpu_paths_give_the_evaluation_the_same_images(tmp_path):
    """compare's feature loaders: every image once, in the same order with the same targets, and
    LiDAR's views of the same chosen images, through either path."""
    from tests._helpers.synthetic import write_image_folder

    write_image_folder(tmp_path / "train", num_classes=5, per_class=3, seed=0)
    write_image_folder(tmp_path / "val", num_classes=5, per_class=2, seed=1)
    data = {"dataset": "custom", "train_path": str(tmp_path / "train")}
    data.update(val_path=str(tmp_path / "val"), num_workers=0, augmentations={"crop_size": 32})
    seen = {}
    for fmt in ("image_folder", "gpu"):
        cfg = OmegaConf.create({"accelerator": "cpu", "seed": 0, "data": {**data, "format": fmt}})
        path = make_data_path(parse_data_settings(cfg))
        run = parse_loader_settings(cfg, path.settings)
        train, val = path.feature_loaders(run, batch_size=4)
        targets = [torch.cat([y for _, y in loader]) for loader in (train, val)]
        request = ViewRequest(None, lambda n: torch.arange(n)[:3], 2, 4, 0, torch.device("cpu"))
        views = path.lidar_views(run, request)
        shape = next(iter(val))[0].shape[1:]
        seen[fmt] = ([t.tolist() for t in targets], tuple(views.shape), tuple(shape))
    assert seen["image_folder"] == seen["gpu"]
    assert seen["gpu"][0][0] == sorted(seen["gpu"][0][0]) and len(seen["gpu"][0][1]) == 10
    assert seen["gpu"][1] == (6, 3, 32, 32)
