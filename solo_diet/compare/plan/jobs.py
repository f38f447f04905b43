"""The plan of a comparison: its jobs, each composed with its budget once, in its own folder, and
what identifies a job's work, so that finished work is kept: content hashed, never locations."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from solo_diet.compare.plan import budgets
from solo_diet.compare.run.record import progress, read_json
from solo_diet.compare.spec.settings import (
    BUDGET_TARGETS,
    SEEDED_REFERENCES,
    DataSettings,
    Run,
    Spec,
)
from solo_diet.core.errors import ConfigError
from solo_diet.core.metrics.logreg import PROTOCOL as LOGREG_PROTOCOL
from solo_diet.core.settings import device_count, unknown_method_hint


@dataclass(frozen=True)
class Job:
    """A run's pretraining at one seed and its evaluation, or a reference row."""

    name: str
    key: str
    run_dir: Path
    cfg: DictConfig
    seed: Optional[int] = None
    reference: Optional[str] = None
    budget: Optional[budgets.RunBudget] = None

    @property
    def label(self) -> str:
        kind = "reference" if self.reference is not None else "run"
        return f"{kind} {self.name!r}" + (f" seed {self.seed}" if self.seed is not None else "")

    @property
    def cfg_seed(self) -> Any:
        if self.reference is not None and self.reference not in SEEDED_REFERENCES:
            return None
        return OmegaConf.select(self.cfg, "seed")

    def gpus(self) -> int:
        """GPUs the job needs: 0 on CPU, the pretraining's device count (1 for a reference row)."""
        if str(OmegaConf.select(self.cfg, "accelerator", default="auto")) == "cpu":
            return 0
        return 1 if self.reference is not None else device_count(self.cfg)


def quoted(key: str, value: Any) -> str:
    """A forced Hydra override ``++key=value`` (strings and paths quoted)."""
    return f"++{key}='{value}'" if isinstance(value, (str, Path)) else f"++{key}={value}"


def data_overrides(data: DataSettings) -> list[str]:
    """The spec's data set, forced on every pretraining and probe config."""
    keys = ("dataset", "train_path", "val_path", "format")
    return [quoted(f"data.{key}", getattr(data, key)) for key in keys if getattr(data, key)]


def compose(owner: str, path: str | Path, name: str, overrides: Sequence[str]) -> DictConfig:
    """``compose_cfg``; missing files and bad overrides raise a ConfigError naming ``owner``."""
    from hydra.errors import HydraException

    from solo_diet.launch.common import compose_cfg

    try:
        return compose_cfg(str(path), name, overrides)
    except (FileNotFoundError, HydraException, ConfigError) as err:
        raise ConfigError(f"{owner}: {str(err).splitlines()[0]}") from err


def compose_run(
    spec: Spec, run: Run, run_dir: Path, seed: Optional[int]
) -> tuple[DictConfig, budgets.RunBudget]:
    """The run's pretraining cfg (its YAML, the overrides, what the spec forces) and its budget."""
    from solo.methods import METHODS

    forced = [
        quoted("name", run.name),
        quoted("checkpoint.dir", run_dir / "pretrain"),
        "++checkpoint.enabled=True",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # a line per epoch instead (EpochCostLogger)
    ] + ([f"++seed={seed}"] if seed is not None else [])
    given = [*spec.trainer, *spec.pretrain_overrides, *run.overrides, *data_overrides(spec.data)]
    cfg = compose(f"run {run.name!r}", run.config_path, run.config_name, given + forced)
    if cfg.get("method") not in METHODS:
        hint = unknown_method_hint(cfg.get("method"), METHODS)
        raise ConfigError(f"run {run.name!r}: unknown method {cfg.get('method')!r}; {hint}")
    if OmegaConf.select(cfg, "max_steps") not in (None, -1):
        raise ConfigError(
            f"conflicting budgets: run {run.name!r} sets max_steps={cfg.max_steps}; the budget is "
            "epochs."
        )
    limit = OmegaConf.select(cfg, "limit_train_batches")
    if spec.budget.limit_train_batches is None and limit not in (None, 1.0):
        raise ConfigError(
            f"conflicting budgets: {run.config_name}.yaml of run {run.name!r} sets "
            f"limit_train_batches={limit}; set `budget.limit_train_batches` for every run instead."
        )
    budget = budgets.run_budget(spec, run, cfg)
    written = {target: getattr(spec.budget, key) for key, target in BUDGET_TARGETS.items()} | {
        "max_epochs": budget.epochs,  # its own epochs, checkpoints and validations
        "checkpoint.frequency": budgets.checkpoint_interval(spec.budget, budget.epochs),
        "check_val_every_n_epoch": budgets.validation_interval(spec.budget, budget.epochs),
    }
    for key, value in written.items():
        if value is not None:
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg, budget


def compose_linear(
    spec: Spec, checkpoint: Path, run_dir: Path, probe: Sequence[str] = ()
) -> DictConfig:
    """The offline probe cfg, identical for every run but for the checkpoint (and ``probe``)."""
    forced = [
        *probe,
        quoted("pretrained_feature_extractor", checkpoint),
        quoted("checkpoint.dir", run_dir / "linear"),
        "++checkpoint.enabled=False",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # a job log gets the probe's result, not a bar per step
    ]
    overrides = [*spec.trainer, *spec.linear.overrides, *data_overrides(spec.data), *forced]
    return compose("`linear`", spec.linear.config_path, spec.linear.config_name, overrides)


def plan_jobs(spec: Spec) -> list[Job]:
    """Every job, composed: each run once per seed, then the reference rows."""
    out = spec.output_dir
    seeds = list(spec.seeds) if spec.seeds is not None else [None]
    jobs = []
    for run in spec.runs:
        cfg = budget = None
        for seed in seeds:
            key = f"runs/{run.name}" + (f"/seed_{seed}" if seed is not None else "")
            if cfg is None:
                cfg, budget = compose_run(spec, run, out / key, seed)
            else:  # the other seeds differ only in these two keys: one Hydra compose a run
                cfg = copy.deepcopy(cfg)
                OmegaConf.update(cfg, "seed", seed)
                OmegaConf.update(cfg, "checkpoint.dir", str(out / key / "pretrain"))
            jobs.append(Job(run.name, key, out / key, cfg, seed, budget=budget))
    first_run = jobs[: len(seeds)]
    for row in spec.reference_rows:
        seeded = row in SEEDED_REFERENCES
        for job in first_run if seeded else first_run[:1]:
            row_seed = job.seed if seeded else None
            key = f"references/{row}" + (f"/seed_{row_seed}" if row_seed is not None else "")
            jobs.append(Job(row, key, out / key, job.cfg, row_seed, reference=row))
    return jobs


def longest_first(jobs: Sequence[Job]) -> list[Job]:
    """``jobs`` in the order that lets a fan-out end soonest: runs never measured (spec order),
    then by the longest pretraining a ``result.json`` of the run records, reference rows last,
    ``raw_pixels`` first of them (its probes read the widest features: 23 s against 11 to 13 for
    ``random_init`` on an H200)."""

    def rank(job: Job) -> tuple[int, float]:
        if job.reference is not None:
            return (2, float(job.reference != "raw_pixels"))
        folders = job.run_dir.parent.glob("seed_*") if job.seed is not None else [job.run_dir]
        times = [read_json(folder / "result.json").get("pretrain_wall_s") for folder in folders]
        measured = max((t for t in times if isinstance(t, (int, float))), default=None)
        return (0, 0.0) if measured is None else (1, -measured)

    return sorted(jobs, key=rank)  # stable: spec order among equals


def latest_checkpoint(folder: Path) -> Optional[Path]:
    """The newest checkpoint under ``folder`` that loads; a newer one that does not is named."""
    from solo_diet.launch.checkpointing import newest_loading

    return newest_loading(folder.glob("**/*.ckpt"), say=progress)


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


def _training_payload(cfg: DictConfig, recipe: bool) -> dict:
    payload = OmegaConf.to_container(cfg, resolve=True)
    for key in ("checkpoint", "check_val_every_n_epoch", "enable_progress_bar"):
        payload.pop(key, None)
    data = payload.get("data") or {}
    payload["data"] = (
        {key: value for key, value in data.items() if key not in DATA_READING_KEYS}
        if recipe
        else with_data_signatures(data)
    )
    return payload


def training_fingerprint(cfg: DictConfig) -> str:
    """Changes with what changes the trained weights (the data's files too), not with locations."""
    return fingerprint(_training_payload(cfg, recipe=False))


def recipe_fingerprint(cfg: DictConfig) -> str:
    """The run's recipe, blind to where and how a machine reads the data (``DATA_READING_KEYS``)."""
    return fingerprint(_training_payload(cfg, recipe=True))


def evaluation_fingerprint(spec: Spec) -> str:
    """Changes with any evaluation setting, the probe's config, the LiDAR views or the data."""
    settings = dataclasses.asdict(spec.evaluation)
    views = settings["lidar_augmentations"]  # the views' content, not their place
    if views:
        settings["lidar_augmentations"] = OmegaConf.to_container(OmegaConf.load(views))
    probe = compose_linear(spec, Path("checkpoint"), Path("run"))
    probe_settings = OmegaConf.to_container(probe, resolve=True)
    probe_settings.pop("enable_progress_bar", None)
    probe_settings["data"] = with_data_signatures(probe_settings.get("data") or {})
    probes = {"linear": probe_settings, "logreg": LOGREG_PROTOCOL}
    return fingerprint(settings | probes | {"data_format": spec.data.format})


def reference_fingerprint(spec: Spec, job: Job, eval_fingerprint: str) -> str:
    """A reference row's evaluation, data and, for ``random_init``, architecture and seed."""
    data = with_data_signatures(dataclasses.asdict(spec.data))
    if job.reference not in SEEDED_REFERENCES:
        return fingerprint([eval_fingerprint, job.reference, data])
    arch = OmegaConf.to_container(job.cfg.backbone, resolve=True)
    return fingerprint([eval_fingerprint, job.reference, arch, job.cfg_seed, data])
