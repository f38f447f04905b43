"""Checkpoints load without pickle: a planted payload never runs unless the caller opts out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from omegaconf import OmegaConf
from solo.methods import METHODS

from solo_diet.core.errors import ConfigError
from solo_diet.methods.checkpoint import (
    PretrainedCheckpoint,
    UnsafeCheckpoint,
    load_backbone_weights,
    load_checkpoint_file,
)
from tests._helpers.tiny import tiny_cfg

pytestmark = pytest.mark.solo


def touch(path: str) -> None:
    """What the planted pickle calls when it is unpickled."""
    Path(path).touch()


class RunsCodeWhenUnpickled:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return touch, (str(self.marker),)


@pytest.fixture
def diet_run(tmp_path) -> tuple[Path, dict]:
    """A DIET checkpoint (Lightning's layout) with its args.json, and its state dict."""
    cfg = tiny_cfg("diet", {"num_samples": 8})
    model = METHODS["diet"](cfg)
    (tmp_path / "args.json").write_text(json.dumps(OmegaConf.to_container(model.cfg)))
    state = model.state_dict()
    torch.save({"epoch": 0, "state_dict": state}, tmp_path / "diet-ep=0.ckpt")
    return tmp_path / "diet-ep=0.ckpt", state


def plant(checkpoint: Path, marker: Path) -> None:
    """The same checkpoint with an object whose unpickling writes ``marker``."""
    content = torch.load(checkpoint, weights_only=True)
    content["callbacks"] = {"payload": RunsCodeWhenUnpickled(marker)}
    torch.save(content, checkpoint)


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(diet_run, tmp_path):
    checkpoint, _ = diet_run
    marker = tmp_path / "code-ran"
    plant(checkpoint, marker)
    pretrained = PretrainedCheckpoint(checkpoint)
    backbone = METHODS["diet"](tiny_cfg("diet", {"num_samples": 8})).backbone
    loaders = (
        lambda: load_checkpoint_file(checkpoint),
        lambda: load_backbone_weights(backbone, checkpoint),  # what `solo-diet linear` calls
        pretrained.backbone,
        pretrained.method,
    )
    for load in loaders:
        with pytest.raises(UnsafeCheckpoint, match="allow_pickle_checkpoint=True") as refused:
            load()
        assert "test_checkpoint.touch" in str(refused.value)
        assert isinstance(refused.value, ConfigError)  # launchers print it as a one-line error
    assert not marker.exists()


def test_opting_out_loads_with_pickle_and_warns(diet_run, tmp_path):
    checkpoint, state = diet_run
    marker = tmp_path / "code-ran"
    plant(checkpoint, marker)
    backbone = METHODS["diet"](tiny_cfg("diet", {"num_samples": 8})).backbone  # freshly initialised
    with pytest.warns(UserWarning, match="runs any code the file carries"):
        loaded = load_backbone_weights(backbone, checkpoint, allow_pickle=True)
    assert marker.exists()  # the planted payload is real: pickle ran it
    assert loaded == len(backbone.state_dict())
    assert all(torch.equal(v, state[f"backbone.{k}"]) for k, v in backbone.state_dict().items())


def test_omegaconf_hyper_parameters_load_without_pickle(diet_run):
    checkpoint, state = diet_run
    content = torch.load(checkpoint, weights_only=True)
    hparams = OmegaConf.create(
        {"optimizer": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": "${x}", "x": 1}
    )
    content["hyper_parameters"] = {"cfg": hparams, "seed": 5}
    torch.save(content, checkpoint)

    loaded = load_checkpoint_file(checkpoint)

    assert loaded["hyper_parameters"]["cfg"] == hparams and loaded["hyper_parameters"]["seed"] == 5
    model = PretrainedCheckpoint(checkpoint).method()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert not model.training


def test_missing_files_say_what_is_missing(diet_run, tmp_path):
    checkpoint, _ = diet_run
    with pytest.raises(ConfigError, match="does not exist, nor does its folder"):
        PretrainedCheckpoint(tmp_path / "nowhere" / "nothing.ckpt")
    held = ", ".join(sorted(c.name for c in checkpoint.parent.glob("*.ckpt")))
    typo = checkpoint.parent / "ep=99.ckpt"
    listing = f"checkpoint {typo} does not exist; {checkpoint.parent} holds {held}."
    with pytest.raises(ConfigError, match=re.escape(listing)):  # the folder's, on one line
        PretrainedCheckpoint(typo)
    newest = re.escape(f"is a folder, not a .ckpt file; its newest .ckpt is {checkpoint}.")
    with pytest.raises(ConfigError, match=newest):
        PretrainedCheckpoint(checkpoint.parent)  # the run's folder
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="is a folder, not a .ckpt file; it holds no .ckpt file"):
        PretrainedCheckpoint(tmp_path / "empty")
    (checkpoint.parent / "args.json").unlink()
    with pytest.raises(ConfigError, match="no args.json next to") as missing:
        PretrainedCheckpoint(checkpoint)
    assert "`solo-diet linear ... ++backbone.name=<name> ++pretrain_method=<method>`" in str(
        missing.value
    )
