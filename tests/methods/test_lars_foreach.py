"""``optimizer.name: lars_foreach`` trains a solo-learn method exactly like ``lars``: the same
SimCLR run, seeded alike, ends with the same weights (solo-learn's BaseMethod, Lightning, CPU)."""

from __future__ import annotations

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from lightning.pytorch import seed_everything
from solo.methods import METHODS

import solo_diet
from solo_diet.core.lars import ForeachLARS
from tests._helpers.tiny import fake_pretrain_loader, tiny_cfg, tiny_trainer

pytestmark = pytest.mark.solo

SIMCLR = {"proj_hidden_dim": 16, "proj_output_dim": 8, "temperature": 0.2}


def trained_weights(optimizer: str) -> tuple[dict, type]:
    seed_everything(0)
    cfg = tiny_cfg("simclr", SIMCLR)
    cfg.optimizer.name = optimizer
    cfg.optimizer.kwargs = {"momentum": 0.9, "eta": 0.02, "clip_lr": True}
    cfg.optimizer.lr = 0.3
    model = METHODS["simclr"](cfg)
    trainer = tiny_trainer(cfg, fast_dev_run=False, max_epochs=2, limit_val_batches=0)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=16, shuffle=False))
    used = type(trainer.optimizers[0])
    return {k: v.detach().clone() for k, v in model.backbone.state_dict().items()}, used


def test_simclr_with_lars_foreach_ends_where_lars_does():
    solo_diet.register()
    theirs, their_optimizer = trained_weights("lars")
    ours, our_optimizer = trained_weights("lars_foreach")
    assert our_optimizer is ForeachLARS and their_optimizer.__name__ == "LARS"
    seed_everything(0)
    start = METHODS["simclr"](tiny_cfg("simclr", SIMCLR)).backbone.state_dict()
    moved = 0
    for name, value in theirs.items():
        assert torch.allclose(ours[name].float(), value.float(), rtol=1e-4, atol=1e-5), name
        moved += not torch.equal(value, start[name]) and value.is_floating_point()
    assert moved > 10  # the run trained
