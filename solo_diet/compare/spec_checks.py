"""The checks of a comparison spec (:func:`~solo_diet.compare.spec.load_spec` runs them): the
typed ``budget``, ``parallel`` and ``curves`` sections, whose defaults are ``SPEC_DEFAULTS``
(a field without one here is required), and ``seeds``, ``reference_rows`` and ``only``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, ListConfig

from solo_diet.config import ConfigError, closest_name, parse_section, setting

REFERENCE_ROWS = ("random_init", "raw_pixels")
AUTOMATIC = "Or null (automatic)."


@dataclass(frozen=True)
class BudgetSettings:
    """``budget``: one budget for every run (docs/compare.md, "Budgets")."""

    max_epochs: int = setting(None, minimum=1, hint="One budget for every run.")
    samples: Optional[int] = setting(
        None, minimum=1, hint="Forward-backward samples (views counted), or null to match epochs."
    )
    batch_size: int = setting(None, minimum=1, hint="One budget for every run.")
    limit_train_batches: Optional[float] = None
    checkpoint_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    val_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)


@dataclass(frozen=True)
class ParallelSettings:
    """``parallel``: how many jobs run at once, and in which processes."""

    workers: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    jobs_per_gpu: int = setting(
        None, minimum=1, hint="It is how many jobs share one GPU at a time (1: a GPU each)."
    )
    reuse_workers: bool = setting(None)  # true: workers run job after job; false: fresh ones


@dataclass(frozen=True)
class CurvesSettings:
    """``curves``: the learning curves (docs/compare.md, "Learning curves")."""

    points: int = setting(
        None,
        minimum=0,
        hint="It is the number of epochs of the budget where each run's linear probe and kNN "
        "are measured (e.g. curves.points=10; 0: no learning curves).",
    )


SECTIONS = {"budget": BudgetSettings, "parallel": ParallelSettings, "curves": CurvesSettings}


def check_sections(spec: DictConfig) -> None:
    """The typed sections (``SECTIONS``), each key checked by its field."""
    for section, schema in SECTIONS.items():
        parse_section(schema, spec, section, f"`{section}`", strict=False)
    limit = spec.budget.limit_train_batches
    if limit is not None and limit <= 0:
        raise ConfigError(
            f"`budget.limit_train_batches` must be a positive batch count or fraction, got {limit}."
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


def check_seeds(spec: DictConfig, spec_path: str | Path) -> None:
    """``seeds`` and ``reference_rows``."""
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
