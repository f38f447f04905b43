"""What identifies a job's work, so that finished work is kept: content hashed, never locations."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from solo_diet.compare.spec.settings import SEEDED_REFERENCES, Spec
from solo_diet.core.metrics.logreg import PROTOCOL as LOGREG_PROTOCOL

if TYPE_CHECKING:
    from solo_diet.compare.plan.jobs import Job

DATA_PATH_KEYS = ("root", "train_path", "val_path")
# where and how a machine reads the data: not part of a run's recipe
DATA_READING_KEYS = (*DATA_PATH_KEYS, "format", "num_workers", "gpu")


def fingerprint(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def data_signature(path: str) -> str:
    """A hash of a data path's files' relative names and sizes (hidden files left out), cached."""
    if os.path.isfile(path):
        entries = [(os.path.basename(path), os.path.getsize(path))]
    elif os.path.isdir(path):
        prefix = len(os.path.join(path, ""))
        entries = []
        for folder, subfolders, files in os.walk(path):
            subfolders.sort()
            for name in sorted(name for name in files if not name.startswith(".")):
                full = os.path.join(folder, name)
                entries.append((full[prefix:], os.path.getsize(full)))
    else:
        return f"missing: {path}"
    return fingerprint(entries)


def with_data_signatures(data: dict) -> dict:
    """A ``data`` section, each path replaced by its :func:`data_signature`."""
    return {
        key: data_signature(str(value)) if key in DATA_PATH_KEYS and value is not None else value
        for key, value in data.items()
    }


def _training_payload(cfg: DictConfig) -> dict:
    payload = OmegaConf.to_container(cfg, resolve=True)
    for key in ("checkpoint", "check_val_every_n_epoch", "enable_progress_bar"):
        payload.pop(key, None)
    return payload


def training_fingerprint(cfg: DictConfig) -> str:
    """Changes with what changes the trained weights (the data's files too), not with locations."""
    payload = _training_payload(cfg)
    payload["data"] = with_data_signatures(payload.get("data") or {})
    return fingerprint(payload)


def recipe_fingerprint(cfg: DictConfig) -> str:
    """The run's recipe, blind to where and how a machine reads the data (``DATA_READING_KEYS``)."""
    payload = _training_payload(cfg)
    data = payload.get("data") or {}
    payload["data"] = {key: value for key, value in data.items() if key not in DATA_READING_KEYS}
    return fingerprint(payload)


def evaluation_fingerprint(spec: Spec) -> str:
    """Changes with any evaluation setting, the probe's config, the LiDAR views or the data."""
    from solo_diet.compare.evaluate.checkpoint import compose_linear

    settings = dataclasses.asdict(spec.evaluation)
    views = settings.pop("lidar_augmentations")
    settings["lidar_views"] = OmegaConf.to_container(OmegaConf.load(views)) if views else None
    probe = compose_linear(spec, Path("checkpoint"), Path("run"))
    probe_settings = OmegaConf.to_container(probe, resolve=True)
    probe_settings.pop("enable_progress_bar", None)
    probe_settings["data"] = with_data_signatures(probe_settings.get("data") or {})
    probes = {"linear": probe_settings, "logreg": LOGREG_PROTOCOL}
    return fingerprint(settings | probes | {"data_format": spec.data.format})


def reference_fingerprint(spec: Spec, job: "Job", eval_fingerprint: str) -> str:
    """A reference row's evaluation, data and, for ``random_init``, architecture and seed."""
    data = with_data_signatures(dataclasses.asdict(spec.data))
    if job.reference not in SEEDED_REFERENCES:
        return fingerprint([eval_fingerprint, job.reference, data])
    arch = OmegaConf.to_container(job.cfg.backbone, resolve=True)
    return fingerprint([eval_fingerprint, job.reference, arch, job.cfg_seed, data])
