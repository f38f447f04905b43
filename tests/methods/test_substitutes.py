"""Our same-math substitutes for solo-learn's ``LARS`` and ``MomentumUpdater``: what
``substitute_step_parts`` swaps, the key that turns it off, and a BYOL run (LARS + EMA) through
solo-learn's BaseMomentumMethod and Lightning that ends on the same weights either way."""

from __future__ import annotations

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from lightning.pytorch import seed_everything
from solo.methods import METHODS
from solo.utils.momentum import MomentumUpdater

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.core.lars import ForeachLARS
from solo_diet.launch.pretrain import build_model
from solo_diet.launch.settings import parse_performance_settings
from solo_diet.methods.substitutes import (
    ForeachMomentumUpdater,
    substitute_step_parts,
    substitutes_line,
)
from tests._helpers.tiny import fake_pretrain_loader, tiny_cfg, tiny_trainer

pytestmark = pytest.mark.solo

BYOL = {"proj_hidden_dim": 16, "proj_output_dim": 8, "pred_hidden_dim": 16}


def byol_cfg(substitutes=None):
    cfg = tiny_cfg("byol", BYOL, optimizer="sgd", momentum=True)
    cfg.optimizer.update(name="lars", lr=0.3, kwargs={"momentum": 0.9, "eta": 0.02})
    if substitutes is not None:
        cfg.performance = {"foreach_substitutes": substitutes}
    return cfg


def test_swaps_lars_and_the_momentum_updater_and_names_them():
    solo_diet.register()
    cfg = byol_cfg()
    model = METHODS["byol"](cfg)
    made = substitute_step_parts(model)
    assert parse_performance_settings(cfg).foreach_substitutes is True  # the default
    assert cfg.optimizer.name == "lars"  # args.json and compare's fingerprints keep the name
    assert model.optimizer == "lars_foreach"
    updater = model.momentum_updater
    assert type(updater) is ForeachMomentumUpdater
    assert (updater.base_tau, updater.final_tau, updater.cur_tau) == (0.99, 1.0, 0.99)
    line = substitutes_line(made)
    assert "solo_diet.core.lars.ForeachLARS" in line and "ForeachMomentumUpdater" in line
    assert "performance.foreach_substitutes=False" in line and "\n" not in line


def test_the_key_turns_them_off(capsys):
    solo_diet.register()
    cfg = byol_cfg(substitutes=False)
    model = build_model(cfg, METHODS["byol"], parse_performance_settings(cfg))  # as pretrain
    assert model.optimizer == "lars" and type(model.momentum_updater) is MomentumUpdater
    assert "ForeachLARS" not in capsys.readouterr().out and substitutes_line([]) == ""


def test_other_optimizers_and_methods_without_momentum_are_left_alone():
    solo_diet.register()
    cfg = tiny_cfg("simclr", {**BYOL, "temperature": 0.2})
    model = METHODS["simclr"](cfg)
    assert substitute_step_parts(model) == [] and model.optimizer == "adamw"


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_non_bool_value_is_refused_naming_the_key(value):
    solo_diet.register()
    cfg = byol_cfg(substitutes=value)
    with pytest.raises(ConfigError, match="`performance.foreach_substitutes` must be True or"):
        parse_performance_settings(cfg)


def test_the_updater_keeps_solo_learns_tau_schedule():
    ours, theirs = ForeachMomentumUpdater(0.99, 1.0), MomentumUpdater(0.99, 1.0)
    for step in (0, 3, 7, 10):
        ours.update_tau(step, 10)
        theirs.update_tau(step, 10)
        assert ours.cur_tau == theirs.cur_tau  # a float until an update has seen the device
    ours.update(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    assert isinstance(ours.cur_tau, torch.Tensor) and ours.cur_tau.dim() == 0
    assert ours.cur_tau.item() == pytest.approx(theirs.cur_tau, rel=1e-7)  # logged as float32


def trained_byol(substitutes: bool) -> tuple[dict, type, type]:
    seed_everything(0)
    cfg = byol_cfg(substitutes)
    model = METHODS["byol"](cfg)
    if substitutes:
        substitute_step_parts(model)
    trainer = tiny_trainer(cfg, fast_dev_run=False, max_epochs=2, limit_val_batches=0)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=16, shuffle=False))
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return weights, type(trainer.optimizers[0]), type(model.momentum_updater)


def test_byol_trains_to_the_same_weights_with_and_without_substitutes():
    """8 steps of LARS and EMA through Lightning: the online and the momentum networks end equal
    (bitwise on the CPUs tried; 1e-6 relative asserted)."""
    solo_diet.register()
    ours, our_optimizer, our_updater = trained_byol(True)
    theirs, their_optimizer, their_updater = trained_byol(False)
    assert (our_optimizer, our_updater) == (ForeachLARS, ForeachMomentumUpdater)
    assert their_optimizer.__name__ == "LARS" and their_updater is MomentumUpdater
    seed_everything(0)
    start = METHODS["byol"](byol_cfg()).state_dict()
    moved = {"backbone": 0, "momentum_backbone": 0}
    for name, value in theirs.items():
        if not value.is_floating_point():
            assert torch.equal(ours[name], value), name
            continue
        assert (ours[name] - value).abs().max() <= 1e-6 * value.abs().max().clamp_min(1e-12), name
        part = name.split(".")[0]
        if part in moved and name.endswith("weight"):
            moved[part] += not torch.equal(value, start[name])
    assert moved["backbone"] > 5 and moved["momentum_backbone"] > 5  # both networks trained
