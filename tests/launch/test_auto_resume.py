"""Auto-resume: the newest matching checkpoint that loads, refused when trained on other data."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.utils.auto_resumer", reason=NEEDS_SOLO)

from solo_diet.config import ConfigError
from solo_diet.launch.checkpointing import auto_resume_checkpoint

pytestmark = pytest.mark.solo


def test_a_matching_run_resumes_unless_its_data_differ(tmp_path):
    cfg = OmegaConf.create(
        {
            "name": "run",
            "method": "diet",
            "data": {"dataset": "custom", "train_path": "a/train"},
            "auto_resume": {"max_hours": 36},
        }
    )
    folder = tmp_path / "diet" / "abc"
    folder.mkdir(parents=True)
    for epoch in (0, 1):
        torch.save({"epoch": epoch}, folder / f"run-abc-ep={epoch}.ckpt")
    args = {**OmegaConf.to_container(cfg), "wandb_run_id": "w1"}
    (folder / "args.json").write_text(json.dumps(args))
    found, run_id = auto_resume_checkpoint(cfg, tmp_path / "diet", say=print)
    assert (found.name, run_id) == ("run-abc-ep=1.ckpt", "w1")
    cfg.data.train_path = "b/train"  # AutoResumer's keys still match; the data do not
    with pytest.raises(ConfigError, match=r"trained with data.train_path='a/train', but this run"):
        auto_resume_checkpoint(cfg, tmp_path / "diet", say=print)
