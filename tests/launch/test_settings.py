"""The data settings: the config read, filled and checked once at the launcher's boundary; each bad
key is one line naming the key and the fix; the core's plain errors translated into key names."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from solo_diet.compare.spec.load import resolve_launch_format
from solo_diet.core.data.loader import GPUBatchLoader
from solo_diet.core.data.tensor_data import ImageTensors
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import core_errors_named
from solo_diet.launch import settings
from solo_diet.launch.datapaths import parse_data_settings
from solo_diet.launch.launch_checks import TrainingSettings, check_cfg_before_parse
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    DataSettings,
    GPUDataSettings,
)


def cfg_of(**data):
    cfg = OmegaConf.create({"accelerator": "cpu", "data": {"dataset": "custom", **data}})
    OmegaConf.set_struct(cfg, False)
    return cfg


def test_defaults_are_filled_into_the_cfg_and_returned_as_frozen_settings():
    cfg = cfg_of()
    parsed = parse_data_settings(cfg)
    assert parsed == DataSettings("image_folder", None) and cfg.data.format == "image_folder"
    assert "gpu" not in cfg.data  # the GPU path's keys are read with that path only
    with pytest.raises(AttributeError):
        parsed.format = "gpu"  # frozen


def test_the_training_settings_are_parsed_once_and_returned():
    cfg = OmegaConf.create({"max_epochs": 3, "max_steps": -1, "optimizer": {"batch_size": 4}})
    expected = TrainingSettings(batch_size=4, max_epochs=3, max_steps=-1)
    assert check_cfg_before_parse(cfg) == expected
    cfg.max_steps = -2
    with pytest.raises(ConfigError, match=r"^`max_steps` must be an integer >= -1, got -2\."):
        check_cfg_before_parse(cfg)


def test_gpu_settings_are_filled_checked_and_carry_the_loader_device():
    cfg = cfg_of(format="gpu", gpu={"image_size": 16})
    parsed = parse_data_settings(cfg)
    assert parsed.gpu == GPUDataSettings("auto", 16, None, True, True, "cpu")
    assert OmegaConf.to_container(cfg.data.gpu) == {
        "storage": "auto",
        "image_size": 16,
        "decode_threads": None,
        "cuda_graphs": True,
        "decode_cache": True,
        "on_corrupt": "stop",
    }


@pytest.mark.parametrize(
    "data, top, message",
    [
        ({"format": "gpuu"}, {}, r"^`data.format` must be one of \['image_folder', 'h5', 'dali', "),
        ({"format": "gpu", "gpu": 3}, {}, r"^`data.gpu` must be a mapping of \['storage'"),
        ({"format": "gpu", "gpu": {"storag": "auto"}}, {}, r"Did you mean `data.gpu.storage`\?"),
        ({"format": "gpu", "gpu": {"storage": "vram"}}, {}, r"^`data.gpu.storage` must be one of"),
        ({"format": "gpu", "gpu": {"image_size": 0}}, {}, r"^`data.gpu.image_size` must be a"),
        ({"format": "gpu", "gpu": {"decode_threads": 1.5}}, {}, r"^`data.gpu.decode_threads`"),
        ({"format": "gpu", "gpu": {"cuda_graphs": "yes"}}, {}, r"^`data.gpu.cuda_graphs` must be"),
        ({"format": "gpu", "gpu": {"decode_cache": 1}}, {}, r"^`data.gpu.decode_cache` must be"),
        ({"format": "gpu"}, {"dali": {"device": "gpu"}}, r"`dali` options apply to data.format"),
        ({"format": "gpu"}, {"accelerator": "tpu"}, r"runs on `accelerator: gpu` or `cpu`"),
    ],
)
def test_each_bad_key_is_one_line_naming_it(data, top, message):
    cfg = cfg_of(**data)
    cfg.update(top)
    with pytest.raises(ConfigError, match=message) as error:
        parse_data_settings(cfg)
    assert "\n" not in str(error.value)


def test_the_gpu_keys_are_parsed_once_per_run(monkeypatch):
    """The settings parser reads ``data.gpu`` once; the data path's loaders reuse the result."""
    from solo_diet.launch.datapaths import gpu as gpu_path
    from solo_diet.launch.datapaths import make_data_path
    from solo_diet.launch.settings import parse_loader_settings

    calls = []
    check = settings.GPUDataSettings.checked
    counted = lambda self, cfg: calls.append(1) or check(self, cfg)  # noqa: E731
    monkeypatch.setattr(settings.GPUDataSettings, "checked", counted)
    monkeypatch.setattr(
        gpu_path, "load_images", lambda *a, **k: _tiny_images(), raising=True
    )  # no files: what is counted is the settings, not the decoding
    cfg = cfg_of(format="gpu", train_path=".", val_path=".", fraction=-1, augmentations={})
    cfg.update(seed=0, devices=[0], optimizer={"batch_size": 2, "lr": 0.1})
    cfg.data.augmentations.crop_size = 8
    data = parse_data_settings(cfg)
    path, run = make_data_path(data), parse_loader_settings(cfg, data)
    path.classification_val_loader(run, 2)
    path.linear_loaders(run)
    path.feature_loaders(run, 2)
    assert len(calls) == 1


def _tiny_images() -> ImageTensors:
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    return ImageTensors(images, torch.arange(6) % 2)


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("storage", "gpu", r"^`data.gpu.storage` must be one of \['auto', 'device', 'pinned'\]"),
        ("cuda_graphs", "yes", r"^`data.gpu.cuda_graphs` must be True or False"),
    ],
)
def test_the_cores_argument_errors_are_named_as_keys(argument, value, message):
    """The loader raises a plain ValueError about its argument; the settings layer names the key."""
    views = lambda rows, g: [rows.float()]  # noqa: E731
    with pytest.raises(ValueError, match=f"^argument `{argument}`"):
        GPUBatchLoader.for_pretraining(_tiny_images(), 2, views, device="cpu", **{argument: value})
    with pytest.raises(ConfigError, match=message), core_errors_named(GPU_ARGUMENT_KEYS):
        GPUBatchLoader.for_pretraining(_tiny_images(), 2, views, device="cpu", **{argument: value})
    with pytest.raises(ValueError, match="smaller than one global batch"):
        with core_errors_named(GPU_ARGUMENT_KEYS):  # other errors pass unchanged
            GPUBatchLoader.for_pretraining(_tiny_images(), 8, views, device="cpu")


def test_demo_and_compare_resolve_auto_and_name_their_key(tmp_path):
    assert resolve_launch_format("auto", True, "--data-format") == "gpu"
    assert resolve_launch_format("auto", False, "--data-format") == "image_folder"
    with pytest.raises(ValueError, match="^--data-format must be one of"):
        resolve_launch_format("dali", True, "--data-format")
