"""Registered methods for the suite: their tiny settings (solo-learn's from KWARGS, ours from
their contract), the per-method check by hand, the SEM twin checks, and which fits stay in the
fast tier."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from solo.methods import METHODS
from solo.methods.base import BaseMethod, BaseMomentumMethod

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.methods.contract import method_contract
from tests._helpers.tiny import (
    batch_of,
    fake_pretrain_loader,
    fake_val_loader,
    smoke_cfg,
    tiny_trainer,
)

L, V, D, B = 4, 3, 8, 4

PROJ = {"proj_hidden_dim": 16, "proj_output_dim": 8}

KWARGS = {
    "simclr": {**PROJ, "temperature": 0.2},
    "supcon": {**PROJ, "temperature": 0.2},
    "byol": {**PROJ, "pred_hidden_dim": 16},
    "simsiam": {**PROJ, "pred_hidden_dim": 16},
    "mocov3": {**PROJ, "pred_hidden_dim": 16, "temperature": 0.2},
    "nnbyol": {**PROJ, "pred_hidden_dim": 16, "queue_size": 16},
    "nnsiam": {**PROJ, "pred_hidden_dim": 16, "queue_size": 16},
    "nnclr": {**PROJ, "pred_hidden_dim": 16, "queue_size": 16, "temperature": 0.2},
    "all4one": {**PROJ, "pred_hidden_dim": 16, "queue_size": 16, "temperature": 0.2},
    "mocov2plus": {**PROJ, "queue_size": 16, "temperature": 0.2},
    "ressl": {**PROJ, "queue_size": 16, "temperature_q": 0.1, "temperature_k": 0.04},
    "barlow_twins": {**PROJ, "lamb": 5e-3, "scale_loss": 0.025},
    "vicreg": {**PROJ, "sim_loss_weight": 25.0, "var_loss_weight": 25.0, "cov_loss_weight": 1.0},
    "vibcreg": {**PROJ, "sim_loss_weight": 25.0, "var_loss_weight": 25.0, "cov_loss_weight": 200.0},
    "wmse": {
        "proj_hidden_dim": 16,
        "proj_output_dim": 2,
        "whitening_size": 4,
        "whitening_iters": 1,
    },
    "swav": {
        **PROJ,
        "num_prototypes": 10,
        "queue_size": 0,
        "temperature": 0.1,
        "epoch_queue_starts": 0,
        "freeze_prototypes_epochs": 0,
    },
    "deepclusterv2": {**PROJ, "num_prototypes": [5, 5], "kmeans_iters": 2, "temperature": 0.1},
    "dino": {
        **PROJ,
        "num_prototypes": 16,
        "norm_last_layer": True,
        "clip_grad": 0,
        "freeze_last_layer": 1,
        "student_temperature": 0.1,
        "teacher_temperature": 0.07,
        "warmup_teacher_temperature": 0.04,
        "warmup_teacher_temperature_epochs": 1,
        "use_bn_in_head": False,
    },
}  # solo-learn's own methods: ours declare their tiny settings in their contract (smoke_kwargs)


def declared_methods() -> list:
    """The registered methods that declare their contract (ours and any method added by the
    guide), without the twins: the contract tells how to build them."""
    solo_diet.register()
    return sorted(
        name
        for name, cls in METHODS.items()
        if "contract" in cls.__dict__ and not name.endswith("_sem")
    )


def sem_cfg(method: str, **sem):
    """A tiny cfg of ``<method>_sem``: solo-learn's methods from KWARGS, ours from their contract
    (``smoke_cfg``)."""
    kwargs = {**KWARGS.get(method, {}), "sem": {"num_simplices": L, "simplex_dim": V, **sem}}
    return smoke_cfg(f"{method}_sem", kwargs, momentum=True)


def slot_embedders(model):
    online = model.get_submodule(model._sem_online).embedder
    momentum = model.get_submodule(model._sem_momentum).embedder if model._sem_momentum else None
    return online, momentum


def check_twin_builds_and_fits(method: str):
    """``<method>_sem`` builds with SEM before its projector/head, fits a fast_dev_run through
    solo-learn's pipeline and trains its embedder."""
    cfg = sem_cfg(method, tau_online=0.5, tau_target=2.0)
    model = METHODS[f"{method}_sem"](cfg)
    assert (model.backbone_dim, model.features_dim, model.classifier.in_features) == (D, L * V, D)
    online, momentum = slot_embedders(model)
    assert (online.linear.in_features, online.out_dim, online.tau) == (D, L * V, 0.5)
    if isinstance(model, BaseMomentumMethod):
        assert momentum is not None and momentum.tau == 2.0
        online_slot, momentum_slot = (
            model.get_submodule(model._sem_online),
            model.get_submodule(model._sem_momentum),
        )
        pairs = list(zip(online_slot.parameters(), momentum_slot.parameters()))
        assert len(pairs) == len(list(online_slot.parameters())) > len(list(online.parameters()))
        for p_online, p_momentum in pairs:  # embedder and projector/head start equal
            assert torch.equal(p_online, p_momentum) and not p_momentum.requires_grad
    else:
        assert momentum is None

    out = model(batch_of(cfg, batch_size=B)[1][0])
    assert out["feats"].shape == (B, D) and out["sem"].shape == (B, L * V)
    torch.testing.assert_close(out["sem"].reshape(B, L, V).sum(-1), torch.ones(B, L))

    weight_before = online.linear.weight.detach().clone()
    trainer = tiny_trainer(cfg)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=32), fake_val_loader(cfg))
    logged = trainer.callback_metrics
    assert 0 <= logged["train_sem_entropy"] <= torch.log(torch.tensor(float(V))) + 1e-5
    assert torch.isfinite(logged["train_sem_marginal_entropy"]) and "val_acc1" in logged
    assert not torch.equal(online.linear.weight, weight_before), (
        "the online embedder was not trained"
    )


TYPOS = {  # (misspelt, right) examples; other methods misspell their longest key
    "diet": ("label_smooting", "label_smoothing"),
    "sdiet": ("rows_per_stp", "rows_per_step"),
    "cplearn": ("betta", "beta"),
}


def typo_of(method: str) -> tuple[str, str]:
    """(a misspelt key, the key it misspells) of ``method``: its example in TYPOS, else its longest
    ``method_kwargs`` key without its third letter from the end."""
    if method in TYPOS:
        return TYPOS[method]
    right = max(METHODS[method](smoke_cfg(method)).cfg.method_kwargs, key=lambda k: (len(k), k))
    return right[:-3] + right[-2:], right


def check_a_misspelt_method_kwarg_is_refused(method: str):
    """Every key of our methods has a default, so one without is a typo; a solo-learn method's
    twin keeps solo-learn's handling of its own keys (below)."""
    typo, right = typo_of(method)
    for name, cfg in ((method, smoke_cfg(method)), (f"{method}_sem", sem_cfg(method))):
        cfg.method_kwargs[typo] = 0.5
        message = rf"`method_kwargs.{typo}` is not a setting of method `{name}`\. Did you mean "
        with pytest.raises(ConfigError, match=message + rf"`method_kwargs.{right}`\?"):
            METHODS[name](cfg)


# solo-learn's own methods declare no contract: their tiny settings (ours come from their contract)
SOLO_LEARN_EXTRA_KWARGS = {
    "mae": {"decoder_embed_dim": 16, "decoder_depth": 1, "decoder_num_heads": 2},
}

SEM = {"num_simplices": 4, "simplex_dim": 3}

NOT_PRETRAINING = ("linear",)  # LinearModel wraps a backbone: `solo-diet linear` below


def solo_learn_kwargs(method: str, tiny: dict) -> dict:
    """The ``method_kwargs`` of a solo-learn method (none for ours: their contract has them), a
    ``sem`` section for a twin; sets the ViT backbone MAE needs in ``tiny``."""
    base = method.removesuffix("_sem")
    kwargs = {**KWARGS.get(base, {}), **SOLO_LEARN_EXTRA_KWARGS.get(base, {})}
    if method.endswith("_sem"):
        kwargs["sem"] = dict(SEM)
    if base == "mae":
        tiny.update(backbone="vit_tiny", backbone_kwargs={"img_size": 32, "patch_size": 16})
    return kwargs


def registered_methods() -> list:
    import solo_diet

    solo_diet.register()
    return sorted(name for name in METHODS if name not in NOT_PRETRAINING)


def check_one_training_step(method: str, num_samples: int = 16, batch_size: int = 4) -> None:
    """``method`` built from its contract's smoke config, one ``training_step`` and ``backward`` by
    hand on a tiny CPU batch (no fit; a Trainer only attends ``on_train_start``): a finite loss
    whose gradients reach the backbone (the classifier for solo-learn's ``base``). A
    method whose contract brings a batch sampler trains on that sampler's first batch, which holds
    ``batch_size`` distinct indices of the training set."""
    tiny: dict = {}
    kwargs = solo_learn_kwargs(method, tiny)
    cfg = smoke_cfg(
        method, kwargs, num_samples=num_samples, momentum=True, batch_size=batch_size, **tiny
    )
    method_cls = METHODS[method]
    model = method_cls(cfg)
    indexes, views, targets = batch_of(cfg, batch_size=batch_size, num_samples=num_samples)
    sampler = method_contract(method_cls).train_batch_sampler(cfg, range(num_samples))
    if sampler is not None:
        indexes = torch.as_tensor(next(iter(sampler)))
        assert indexes.unique().numel() == batch_size and 0 <= indexes.min()
        assert indexes.max() < num_samples
        if hasattr(model, "super_batch_sampler"):
            model.super_batch_sampler = sampler
    model.train()
    started_as_in_a_fit(model)
    out = model.training_step([indexes, views, targets], 0)
    loss = out["loss"] if isinstance(out, dict) else out
    assert loss.ndim == 0 and torch.isfinite(loss), f"{method}: loss {loss}"
    loss.backward()
    if type(model) is BaseMethod:  # solo-learn's `base`: its classifier sees detached features
        model = model.classifier
    else:
        model = model.backbone
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads), (
        f"{method}: no gradient reached {type(model).__name__}"
    )


def started_as_in_a_fit(model) -> None:
    """``model.on_train_start()`` on an attached CPU Trainer that never fits (SwAV builds its
    Sinkhorn-Knopp there), then detached again (``self.log`` outside a fit only warns). A method
    that sizes its state from the training set there (DeepClusterV2's k-means memory) is skipped:
    the slow tier's fits step it."""
    model.trainer = Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    try:
        model.on_train_start()
    except AttributeError:
        if model.trainer.train_dataloader is not None:
            raise
        pytest.skip(f"{type(model).__name__}.on_train_start reads the trainer's train dataloader")
    finally:
        model.trainer = None


# the methods whose fits stay in the fast tier on each data path (the slow tier fits every method)
FAST_TIER_FITS = {"diet": "an index method", "simclr": "a two-view one", "byol": "a momentum one"}


def fits_of(cases: list) -> list:
    """``cases`` (methods, or tuples that start with one) as pytest params; those of FAST_TIER_FITS
    are marked to stay in the fast tier (tests/conftest.py puts every other fit in the slow one)."""
    params = []
    for case in cases:
        values = case if isinstance(case, tuple) else (case,)
        params.append(
            pytest.param(*values, marks=[pytest.mark.fast] * (values[0] in FAST_TIER_FITS))
        )
    return params
