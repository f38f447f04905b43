"""The checks of a comparison spec's ``seeds``, ``reference_rows``, ``only``, ``parallel`` and
``curves`` sections (:func:`~solo_diet.compare.spec.load_spec` runs them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.config import ConfigError, closest_name

REFERENCE_ROWS = ("random_init", "raw_pixels")


def _positive_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def check_curves(spec: DictConfig, spec_path: str | Path) -> None:
    """``curves.points``: a non-negative integer (0: off)."""
    points = spec.curves.points
    if isinstance(points, bool) or not isinstance(points, int) or points < 0:
        raise ConfigError(
            f"{spec_path}: `curves.points` must be a non-negative integer: the number of epochs "
            "of the budget where each run's linear probe and kNN are measured (e.g. "
            f"curves.points=10; 0: no learning curves), got {points}."
        )


def check_only(spec: DictConfig, spec_path: str | Path) -> None:
    """``only``: null, or the names of some of the spec's runs and reference rows."""
    names = [str(run.get("name")) for run in spec.runs] + list(spec.reference_rows)
    only = spec.only
    if only is None:
        return
    if not isinstance(only, ListConfig) or len(only) == 0 or not set(only) <= set(names):
        unknown = [n for n in only if n not in names] if isinstance(only, ListConfig) else []
        close = [(n, closest_name(n, names)) for n in unknown]
        hints = ", ".join(f"`{c}` for `{n}`" for n, c in close if c)
        raise ConfigError(
            f"{spec_path}: `only` must be null (every job) or a list of the spec's run and "
            f"reference-row names {names}, got {only}"
            + (f"; did you mean {hints}?" if hints else ".")
        )


def check_seeds_and_workers(spec: DictConfig, spec_path: str | Path) -> None:
    """``seeds``, ``reference_rows``, ``parallel.workers``/``jobs_per_gpu`` and the budget's
    intervals."""
    seeds = spec.seeds
    if seeds is not None and (
        not isinstance(seeds, ListConfig)
        or len(seeds) == 0
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"{spec_path}: `seeds` must be a list of distinct non-negative integers (e.g. "
            f"seeds=[0,1,2]: every run once per seed), or null for each config's own seed; "
            f"got {seeds}."
        )
    rows = spec.reference_rows
    if not isinstance(rows, ListConfig) or not set(rows) <= set(REFERENCE_ROWS):
        raise ConfigError(
            f"{spec_path}: `reference_rows` must be a list of {list(REFERENCE_ROWS)} ([] turns "
            f"them off), got {rows}."
        )
    for key in (
        "budget.checkpoint_every_n_epochs",
        "budget.val_every_n_epochs",
        "parallel.workers",
    ):
        if not _positive_or_none(OmegaConf.select(spec, key)):
            raise ConfigError(
                f"{spec_path}: `{key}` must be a positive integer or null (automatic), got "
                f"{OmegaConf.select(spec, key)}."
            )
    per_gpu = spec.parallel.jobs_per_gpu
    if per_gpu is None or not _positive_or_none(per_gpu):
        raise ConfigError(
            f"{spec_path}: `parallel.jobs_per_gpu` must be a positive integer (how many jobs "
            f"share one GPU at a time; 1: a GPU each), got {per_gpu}."
        )
    if not isinstance(spec.parallel.reuse_workers, bool):
        raise ConfigError(
            f"{spec_path}: `parallel.reuse_workers` must be true (worker processes import once "
            f"and run job after job) or false (a fresh process per job), got "
            f"{spec.parallel.reuse_workers!r}."
        )
