"""What the data paths read, parsed once at the launcher's boundary into frozen settings: the data
paths and the GPU loaders take these settings, never the config; each bad key is one line naming
it; a probe batch fitted to a small training set is returned, not written into anything."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
from omegaconf import OmegaConf

from solo_diet.core.data.pipeline import MultiCropAugmentation
from solo_diet.core.errors import ConfigError
from solo_diet.launch.datapaths import parse_data_settings
from solo_diet.launch.datapaths.base import REGISTRY, DataPath
from solo_diet.launch.settings import (
    PRETRAIN_PROBE_NODE,
    FittedBatch,
    LoaderSettings,
    ProbeAugmentation,
    parse_loader_settings,
)

NODE = {"crop_size": 16, "num_crops": 2, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


def cfg_of(**top):
    data = {"dataset": "custom", "train_path": "train", "val_path": None, "num_workers": 3}
    cfg = OmegaConf.create(
        {
            "accelerator": "cpu",
            "seed": 7,
            "devices": [0, 1],
            "num_nodes": 3,
            "optimizer": {"batch_size": 8, "lr": 0.4},
            "augmentations": [NODE],
            "data": data,
        }
    )
    OmegaConf.set_struct(cfg, False)
    cfg.merge_with(top)
    return cfg


def _hints(function) -> dict[str, str]:
    return {name: str(hint) for name, hint in typing.get_type_hints(function).items()}


def test_the_data_paths_and_the_gpu_loaders_take_settings_never_a_config():
    """Every public method of every data path and every public function of the GPU loaders: no
    argument is a DictConfig (a path declares the section it ``reads``; the parser reads it)."""
    from solo_diet.launch.datapaths.gpu import StreamPath

    typed = {}
    for cls in {DataPath, *REGISTRY.values(), StreamPath, LoaderSettings}:
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                typed[f"{cls.__name__}.{name}"] = _hints(member)
    assert "DataPath.pretrain_data" in typed and "LoaderSettings.fit_probe_batch" in typed
    assert "StreamPath.read_split" in typed
    assert "LoaderSettings" in typed["GPUPath.feature_loaders"]["run"]
    assert not {
        name: hints
        for name, hints in typed.items()
        if any("DictConfig" in hint for arg, hint in hints.items() if arg != "return")
    }
    assert {cls.reads for cls in REGISTRY.values()} == {None, "gpu", "dali"}


def test_the_settings_are_read_once_checked_and_frozen():
    cfg = cfg_of()
    run = parse_loader_settings(cfg, parse_data_settings(cfg), PRETRAIN_PROBE_NODE)
    assert (run.dataset, run.train_path, run.val_path) == ("custom", "train", None)
    assert (run.fraction, run.no_labels, run.num_workers) == (-1.0, False, 3)
    assert (run.batch_size, run.lr, run.seed, run.world_size) == (8, 0.4, 7, 6)
    assert run.probe == ProbeAugmentation(16, 0.08, (0.5,) * 3, (0.25,) * 3)
    assert run.augmentations == tuple(cfg.augmentations) and run.views is None  # image folder
    assert run.workers(0) == 3 and dataclasses.replace(run, num_workers=None).workers(0) == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.batch_size = 4
    cfg.data.format = "gpu"
    gpu_run = parse_loader_settings(cfg, parse_data_settings(cfg), PRETRAIN_PROBE_NODE)
    assert isinstance(gpu_run.views, MultiCropAugmentation)  # parsed here, once
    assert gpu_run.views.num_views == 2


def test_a_linear_probe_reads_its_node_and_named_sets_need_none():
    cfg = cfg_of(data={"augmentations": {"crop_size": 32, "crop_min_scale": 0.5}})
    del cfg["augmentations"]
    run = parse_loader_settings(cfg, parse_data_settings(cfg))
    assert run.probe == ProbeAugmentation(32, 0.5, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert run.augmentations == () and run.views is None
    cifar = cfg_of(data={"dataset": "cifar10", "augmentations": None})
    assert parse_loader_settings(cifar, parse_data_settings(cifar)).probe is None


@pytest.mark.parametrize(
    "top, probe_node, message",
    [
        ({"data": {"fraction": 2}}, PRETRAIN_PROBE_NODE, r"^`data.fraction` must be in \(0, 1\]"),
        ({"data": {"num_workers": -1}}, PRETRAIN_PROBE_NODE, r"^`data.num_workers` must be a non"),
        ({"data": {"no_labels": "no"}}, PRETRAIN_PROBE_NODE, r"^`data.no_labels` must be True"),
        ({"optimizer": {"batch_size": 0}}, PRETRAIN_PROBE_NODE, r"^`optimizer.batch_size` must"),
        ({"seed": "x"}, PRETRAIN_PROBE_NODE, r"^`seed` must be a non-negative integer"),
        ({}, "data.augmentations", r"^`data.augmentations` must be an augmentation node with"),
        (
            {"augmentations": [{**NODE, "crop_size": 0}]},
            PRETRAIN_PROBE_NODE,
            r"^`augmentations\[0\].crop_size` must be a positive integer",
        ),
        (
            {"augmentations": [{**NODE, "mean": "imagenet"}]},
            PRETRAIN_PROBE_NODE,
            r"^`augmentations\[0\].mean` must be a list of numbers",
        ),
    ],
)
def test_each_bad_key_is_one_line_naming_it(top, probe_node, message):
    cfg = cfg_of(**top)
    with pytest.raises(ConfigError, match=message) as error:
        parse_loader_settings(cfg, parse_data_settings(cfg), probe_node)
    assert "\n" not in str(error.value)


def test_a_probe_batch_is_fitted_and_returned_not_written(capsys):
    run = LoaderSettings("custom", batch_size=8, lr=0.4, world_size=2)
    assert run.fit_probe_batch(16) is None  # one global batch fits
    fitted = run.fit_probe_batch(7)
    assert fitted == FittedBatch(7, 3, 8, fitted.lr) and fitted.lr == pytest.approx(0.15)
    assert fitted.report() == {"train_images": 7, "batch_size": 3, "configured_batch_size": 8}
    assert (run.batch_size, run.lr) == (8, 0.4)  # the settings are left as they were
    assert "learning rate 0.4 -> 0.15" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="fewer than the 2 devices"):
        run.fit_probe_batch(1)
