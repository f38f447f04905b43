"""A job whose pretraining failed before it trained (a config error) does not block a rerun with
the corrected config; a job folder that holds another config's training is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare.plan.jobs import plan_jobs
from solo_diet.compare.run.job import pretrain
from solo_diet.compare.run.record import read_json, write_json
from solo_diet.compare.spec.load import load_spec
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo


def _diet_job(tmp_path: Path, label_smoothing: float):
    overrides = tiny_overrides(write_tiny_images(tmp_path / "images"), tmp_path / "out")
    runs = "runs=[{name: diet, config_name: diet}]"
    spec = load_spec(SHIPPED_SPEC, [*overrides, "reference_rows=[]", runs])
    [job] = plan_jobs(spec)
    job.cfg.method_kwargs.label_smoothing = label_smoothing
    job.run_dir.mkdir(parents=True, exist_ok=True)
    return spec, job


def test_a_job_that_failed_before_training_reruns_with_another_config(tmp_path):
    # the first attempt fails on its config before any epoch: state.json names that config
    spec, job = _diet_job(tmp_path, 7.0)
    with pytest.raises(ConfigError, match="label_smoothing` must be in"):
        pretrain(spec, job)
    first = read_json(job.run_dir / "state.json")["pretrain_fingerprint"]

    # the corrected config gets to train (here it fails on its own error, fast), not refused as
    # "pretrained with another config", and the folder now carries its fingerprint
    spec, job = _diet_job(tmp_path, 1.5)
    with pytest.raises(ConfigError, match="got 1.5"):
        pretrain(spec, job)
    second = read_json(job.run_dir / "state.json")["pretrain_fingerprint"]
    assert second != first

    # a folder whose other config finished training is refused, never overwritten
    write_json(job.run_dir / "state.json", {"pretrain_fingerprint": first, "checkpoint": "x.ckpt"})
    with pytest.raises(ConfigError, match="pretrained with another config, budget or data"):
        pretrain(spec, job)
