"""Compute as the learning curves and budgets count it: forward-backward samples, an image counted
once per view the method trains on (every crop, small ones too)."""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig, OmegaConf


def views_per_sample(cfg: DictConfig) -> int:
    """The views a pretraining cfg trains on per image: the ``num_crops`` of its augmentation
    pipelines, summed (solo-learn's ``num_large_crops + num_small_crops``); 1 without any."""
    pipelines = OmegaConf.select(cfg, "augmentations")
    if not isinstance(pipelines, ListConfig) or not pipelines:
        return 1
    return sum(int(p.get("num_crops", 1)) for p in pipelines)


def samples_seen(images: float, views: int) -> float:
    """Forward-backward samples of training on ``images`` images (optimisation steps x global
    batch, what ``EpochCostLogger``'s ``samples`` column sums), each in ``views`` views:
    ``steps x batch x views``."""
    return images * views
