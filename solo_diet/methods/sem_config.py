"""``method_kwargs.sem`` of the ``<name>_sem`` twins: defaults (SEM paper, App. C) and checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import omegaconf

from solo_diet.config import (
    ConfigError,
    check_choice,
    check_int,
    check_known_keys,
    check_positive_int,
    fill_default,
)
from solo_diet.nn.sem import check_temperature

SEM_DEFAULTS: dict[str, Any] = {
    "num_simplices": 5000,  # L
    "simplex_dim": 13,  # V
    "tau_online": 1.0,  # tau_p: online embedder, large crop 0 and small crops
    # tau'_p: momentum embedder, or large crops >= 1 without one; None = tau_online
    "tau_target": None,
    "probe": "backbone",  # what the online classifier reads: backbone output e, or SEM at probe_tau
    "probe_tau": 0.1,  # tau_d of the SEM probe (paper Table 2, BYOL); 0 = one-hot argmax
}
SEM_KEYS = tuple(SEM_DEFAULTS)
PROBES = ("backbone", "sem")


def add_and_assert_sem_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Fill and check ``method_kwargs.sem`` (SEM paper defaults: L=5000, V=13 on CIFAR-100,
    App. C)."""
    sem = fill_default(cfg, "method_kwargs.sem", {})
    if not isinstance(sem, Mapping):
        raise ConfigError(
            f"`method_kwargs.sem` must be a mapping with keys {list(SEM_KEYS)}, got {sem!r}."
        )
    check_known_keys(cfg, "method_kwargs.sem", SEM_KEYS, "SEM")
    for key, default in SEM_DEFAULTS.items():
        fill_default(cfg, f"method_kwargs.sem.{key}", default)
    sem = cfg.method_kwargs.sem
    check_positive_int(cfg, "method_kwargs.sem.num_simplices", "It is L, the number of simplices.")
    check_int(
        cfg,
        "method_kwargs.sem.simplex_dim",
        2,
        "It is V, the size of each simplex (a 1-entry simplex is constant 1).",
    )
    if sem.tau_target is None:
        sem.tau_target = sem.tau_online
    for key, allow_zero in (("tau_online", False), ("tau_target", False), ("probe_tau", True)):
        try:
            sem[key] = check_temperature(sem[key], f"`method_kwargs.sem.{key}`", allow_zero)
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from err
    check_choice(cfg, "method_kwargs.sem.probe", PROBES)
    return cfg
