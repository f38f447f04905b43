"""Each run's budget, epochs or samples (docs/compare.md, "Budgets"), and its intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.compare.spec.settings import BudgetSettings, Run, Spec
from solo_diet.compare.verdicts.claims import Trained
from solo_diet.core.data.tensor_data import folder_samples
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import device_count


def views_per_sample(cfg: DictConfig) -> int:
    """The views a pretraining cfg trains on per image: its pipelines' ``num_crops``, summed."""
    pipelines = OmegaConf.select(cfg, "augmentations")
    if not isinstance(pipelines, ListConfig) or not pipelines:
        return 1
    return sum(int(p.get("num_crops", 1)) for p in pipelines)


def samples_seen(images: float, views: int) -> float:
    """Forward-backward samples of training on ``images`` images, each in ``views`` views."""
    return images * views


def checkpoint_interval(budget: BudgetSettings, epochs: int) -> int:
    """Epochs between checkpoints: ``checkpoint_every_n_epochs``, or a tenth of ``epochs``."""
    return budget.checkpoint_every_n_epochs or math.ceil(epochs / 10)


def validation_interval(budget: BudgetSettings, epochs: int) -> int:
    """``val_every_n_epochs``, or the largest divisor of ``epochs`` up to ``epochs / 50``."""
    if budget.val_every_n_epochs:
        return budget.val_every_n_epochs
    target = max(1, epochs // 50)
    return max(d for d in range(1, target + 1) if epochs % d == 0)


@dataclass(frozen=True)
class RunBudget:
    """A run's epochs, views per sample, loader samples and steps per epoch (None: not counted)."""

    epochs: int
    views: int
    samples_per_epoch: Optional[int]
    matched: str
    source: str
    steps_per_epoch: Optional[int] = None

    @property
    def samples(self) -> Optional[int]:
        if self.samples_per_epoch is None:
            return None
        return self.epochs * self.samples_per_epoch * self.views

    def trained(self) -> Trained:
        """Epochs, steps and images drawn, for the claims' budget verdicts."""
        if self.samples_per_epoch is None:  # the data was not counted: no steps either
            return Trained(self.epochs)
        per_epoch = (self.steps_per_epoch, self.samples_per_epoch)
        return Trained(self.epochs, *(self.epochs * count for count in per_epoch))

    def words(self, run: str) -> str:
        samples = f", {self.samples:,} samples" if self.samples is not None else ""
        views = f"{self.views} view{'s' * (self.views != 1)} per image"
        return f"`{run}`: {self.epochs} epochs ({views}{samples}; {self.source})"


@lru_cache(maxsize=8)
def count_images(folder: Path) -> int:
    """The images of the ImageFolder ``folder`` as solo-learn's loader lists them, counted once."""
    return len(folder_samples(folder))


def count_val_images(spec: Spec) -> Optional[int]:
    """The val split's images where they can be counted (an ImageFolder), else None."""
    try:
        return count_images(Path(str(spec.data.val_path)))
    except ConfigError:
        return None


def loader_epoch(spec: Spec, cfg: DictConfig) -> tuple[int, int]:
    """The pretraining loader's epoch: steps (batches per device) and images over all devices."""
    folder = Path(str(spec.data.train_path))
    images = count_images(folder)
    devices = device_count(cfg)
    batches = math.ceil(images / devices) // spec.budget.batch_size
    limit = spec.budget.limit_train_batches
    if isinstance(limit, int):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = int(batches * limit)
    if batches == 0:  # no step would train; Lightning stops on a cut fraction mid-run
        key, fix = "batch_size", "lower it"
        if math.ceil(images / devices) >= spec.budget.batch_size:
            key, fix = "limit_train_batches", "raise it or set it to null"
        raise ConfigError(
            f"`budget.{key}` must leave one batch an epoch, got {getattr(spec.budget, key)}: "
            f"{folder} holds {images} images, batches of {spec.budget.batch_size} per device on "
            f"{devices} device(s); {fix}."
        )
    return batches, batches * spec.budget.batch_size * devices


def run_budget(spec: Spec, run: Run, cfg: DictConfig) -> RunBudget:
    """The :class:`RunBudget` of ``run`` composed as ``cfg``: its own budget, else the spec's."""
    views, own = views_per_sample(cfg), run.own_budget
    samples = run.samples if own else spec.budget.samples
    if samples is None:
        source = "the run's own budget" if own else "the spec's budget"
        try:  # the data counted where it can be, for the report
            count_images(Path(str(spec.data.train_path)))
        except ConfigError:
            steps, per_epoch = None, None
        else:
            steps, per_epoch = loader_epoch(spec, cfg)
        epochs = run.max_epochs or spec.budget.max_epochs
        return RunBudget(epochs, views, per_epoch, "epochs", source, steps)
    steps, per_epoch = loader_epoch(spec, cfg)
    epochs = round(samples / (per_epoch * views))
    source = f"{samples:,} samples asked, " + ("the run's own" if own else "the spec's")
    if epochs == 0:  # one epoch would train far more than asked: no longer compute-matched
        key = f"run {run.name!r}: `budget.samples`" if own else "`budget.samples`"
        raise ConfigError(
            f"{key} must be at least half an epoch of run {run.name!r} ({per_epoch} images x "
            f"{views} views = {per_epoch * views:,} samples), got {samples:,}: raise it."
        )
    if epochs > spec.budget.max_epochs:
        raise ConfigError(
            f"run {run.name!r}: {samples:,} samples take {epochs} epochs of {per_epoch} images x "
            f"{views} views, above `budget.max_epochs` {spec.budget.max_epochs}; raise it."
        )
    return RunBudget(epochs, views, per_epoch, "samples", source, steps)


def budget_line(spec: Spec, budgets: dict[str, RunBudget]) -> str:
    """The report's line on what every run trained and which budget matched."""
    if {b.matched for b in budgets.values()} == {"samples"} and spec.budget.samples is not None:
        head = f"compute-matched: {spec.budget.samples:,} forward-backward samples, views counted"
    elif len({b.epochs for b in budgets.values()}) <= 1:
        head = "epoch-matched"
    else:
        head = "per-run budgets (neither epochs nor samples matched for every run)"
    runs = "; ".join(b.words(run) for run, b in budgets.items())
    return f"Budget ({head}): {runs}."
