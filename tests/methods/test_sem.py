"""``<name>_sem`` twins: build, fit through solo-learn's pipeline, momentum copies, checkpoints,
refusals."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from solo.methods import BYOL, MAE, METHODS, BaseMethod, LinearModel, SimCLR
from solo.methods.base import BaseMomentumMethod

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.core.nn import simplex_softmax
from solo_diet.methods.contract import Contract, method_contract
from solo_diet.methods.sem import SEMUnsupported, make_sem_twin, sem_feature_extractor
from tests._helpers.methods import (
    KWARGS,
    B,
    D,
    L,
    V,
    check_a_misspelt_method_kwarg_is_refused,
    check_twin_builds_and_fits,
    declared_methods,
    fits_of,
    sem_cfg,
    slot_embedders,
)
from tests._helpers.tiny import (
    batch_of,
    fake_pretrain_loader,
    fake_val_loader,
    tiny_cfg,
    tiny_trainer,
)

pytestmark = pytest.mark.solo

SOLO_METHODS = list(KWARGS)


def test_every_supported_method_has_a_twin_and_refused_ones_none():
    registered = solo_diet.register()
    for name in SOLO_METHODS + declared_methods():
        assert f"{name}_sem" in registered and f"{name}_sem" in METHODS
    assert not {"mae_sem", "linear_sem", "base_sem"} & set(METHODS)
    assert not any(name.endswith("_sem_sem") for name in METHODS)


@pytest.mark.parametrize("method", fits_of(SOLO_METHODS + declared_methods()))
def test_builds_and_fits_fast_dev_run(method):
    check_twin_builds_and_fits(method)


@pytest.mark.parametrize("simplices, size", [(L, V), (3, 5)])
def test_a_twin_declares_its_embedding_width(simplices, size):
    """The projector is built for the L*V of `method_kwargs.sem`, not the backbone's D; the online
    and momentum classifiers read the backbone's D."""
    cfg = sem_cfg("byol", num_simplices=simplices, simplex_dim=size)
    OmegaConf.update(cfg, "momentum.classifier", True)
    model = METHODS["byol_sem"](cfg)
    assert "features_dim" not in vars(model)  # the twin's declared property, never reassigned
    assert (model.features_dim, model.backbone_dim) == (simplices * size, D)
    assert model.get_submodule(model._sem_online).head[0].in_features == simplices * size
    assert model.sem_embedder.linear.in_features == D
    assert model.classifier.in_features == model.momentum_classifier.in_features == D


def test_momentum_embedder_follows_the_online_one_by_ema():
    cfg = sem_cfg("byol")
    model = METHODS["byol_sem"](cfg)
    online, momentum = slot_embedders(model)
    start = momentum.linear.weight.detach().clone()
    tiny_trainer(cfg, fast_dev_run=False, max_steps=2, limit_val_batches=0).fit(
        model, fake_pretrain_loader(cfg, num_samples=16)
    )
    # after updates, EMA leaves it strictly between its start and the trained online weight
    assert not torch.equal(momentum.linear.weight, start)
    assert not torch.equal(momentum.linear.weight, online.linear.weight)


def test_bf16_mixed_precision_with_small_temperatures_stays_finite():
    cfg = sem_cfg("mocov2plus", tau_online=1e-3, tau_target=1e-4, probe="sem", probe_tau=0.0)
    model = METHODS["mocov2plus_sem"](cfg)
    trainer = tiny_trainer(cfg, precision="bf16-mixed")
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=16), fake_val_loader(cfg))
    logged = trainer.callback_metrics
    assert all(
        torch.isfinite(logged[k]) for k in ("train_nce_loss", "train_sem_entropy", "val_loss")
    )


@pytest.mark.parametrize("method, view_taus", [("simclr", (0.5, 2.0)), ("byol", (0.5, 0.5))])
def test_per_view_temperatures(method, view_taus):
    """Without a momentum branch, large crop 1 uses tau_target (official SimCLR/Barlow/SwAV);
    with one, both online views use tau_online and the momentum embedder tau_target."""
    cfg = sem_cfg(method, tau_online=0.5, tau_target=2.0)
    model = METHODS[f"{method}_sem"](cfg)
    online, momentum = slot_embedders(model)
    calls = {"online": [], "momentum": []}
    online.register_forward_hook(lambda m, args, out: calls["online"].append((args[0], out)))
    if momentum is not None:
        momentum.register_forward_hook(
            lambda m, args, out: calls["momentum"].append((args[0], out))
        )
    model.training_step(batch_of(cfg, batch_size=B), 0)

    def reference(embedder, feats, tau):
        bn = embedder.bn
        logits = F.batch_norm(
            embedder.linear(feats), None, None, bn.weight, bn.bias, training=True, eps=bn.eps
        )
        return simplex_softmax(logits, V, tau)

    assert len(calls["online"]) == 2
    for (feats, sem), tau in zip(calls["online"], view_taus):
        torch.testing.assert_close(sem, reference(online, feats, tau))
    for feats, sem in calls["momentum"]:
        torch.testing.assert_close(sem, reference(momentum, feats, 2.0))
    assert len(calls["momentum"]) == (2 if momentum is not None else 0)
    assert model.get_submodule(model._sem_online).tau == 0.5


def test_sem_probe_reads_softmax_of_eval_bn_logits():
    cfg = sem_cfg("vicreg", probe="sem", probe_tau=0.3)
    model = METHODS["vicreg_sem"](cfg)
    assert model.classifier.in_features == L * V
    online, _ = slot_embedders(model)
    with torch.no_grad():
        online.bn.running_mean.uniform_(-1, 1)
        online.bn.running_var.uniform_(0.5, 2)
    bn = online.bn
    mean, var = (
        bn.running_mean.clone(),
        bn.running_var.clone(),
    )  # the projector pass then updates them
    out = model(batch_of(cfg, batch_size=B)[1][0])
    logits = (online.linear(out["feats"]) - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias
    classifier = model.classifier
    probe = F.linear(simplex_softmax(logits, V, 0.3), classifier.weight, classifier.bias)
    torch.testing.assert_close(out["logits"], probe)
    tiny_trainer(cfg).fit(model, fake_pretrain_loader(cfg, num_samples=16), fake_val_loader(cfg))


@pytest.mark.parametrize("method", ["byol", "dino"])
def test_checkpoint_round_trip_and_feature_extractor(method, tmp_path):
    cfg = sem_cfg(method, probe_tau=0.2)
    model = METHODS[f"{method}_sem"](cfg)
    trainer = tiny_trainer(cfg, fast_dev_run=False, max_steps=1, limit_val_batches=0)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=16))
    ckpt = tmp_path / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    args_json = tmp_path / "args.json"
    args_json.write_text(json.dumps(OmegaConf.to_container(model.cfg)))

    args = OmegaConf.create(json.loads(args_json.read_text()))
    reloaded = METHODS[f"{method}_sem"].load_from_checkpoint(ckpt, cfg=args)
    saved, loaded = model.state_dict(), reloaded.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)

    extractor = sem_feature_extractor(ckpt, args_json)
    assert extractor.num_features == L * V and not extractor.training
    x = torch.randn(B, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        expected = slot_embedders(model)[0](model.backbone(x), tau=0.2)
        torch.testing.assert_close(extractor(x), expected)
        one_hot = sem_feature_extractor(ckpt, args_json, tau=0.0)(x)
    assert set(one_hot.unique().tolist()) <= {0.0, 1.0} and one_hot.sum().item() == B * L


def test_backbone_factory_gets_the_base_method_name(monkeypatch):
    """ViT picks its mocov3/mae variant by the method name: a twin must pass ``mocov3``, not
    ``mocov3_sem``."""
    seen = []

    def recording_backbone(method, **kwargs):
        seen.append(method)
        return BaseMethod._BACKBONES["cp_resnet8"](method, **kwargs)

    monkeypatch.setitem(BaseMethod._BACKBONES, "recording", recording_backbone)
    cfg = sem_cfg("mocov3")
    cfg.backbone = {"name": "recording", "kwargs": {"width": D}}
    METHODS["mocov3_sem"](cfg)
    assert seen == ["mocov3", "mocov3"]  # online and momentum backbones
    assert cfg.method == "mocov3_sem"


def test_defaults_are_filled_into_the_cfg():
    model = METHODS["simclr_sem"](tiny_cfg("simclr_sem", KWARGS["simclr"]))
    assert OmegaConf.to_container(model.cfg.method_kwargs.sem) == {
        "num_simplices": 5000,
        "simplex_dim": 13,
        "tau_online": 1.0,
        "tau_target": 1.0,
        "probe": "backbone",
        "probe_tau": 0.1,
    }
    assert model.get_submodule("projector").head[0].in_features == 5000 * 13


@pytest.mark.parametrize(
    "sem, key",
    [
        ({"tau_online": 0.0}, "tau_online"),
        ({"tau_target": -1.0}, "tau_target"),
        ({"probe_tau": -0.1}, "probe_tau"),
        ({"probe": "logits"}, "probe"),
        ({"num_simplices": 0}, "num_simplices"),
        ({"simplex_dim": 1}, "simplex_dim"),
        ({"L": 10}, "`method_kwargs.sem.L` is not a setting of SEM"),
    ],
)
def test_invalid_config_is_refused_naming_the_key(sem, key):
    with pytest.raises(ConfigError, match=key):
        METHODS["simclr_sem"](sem_cfg("simclr", **sem))


def test_refused_methods_say_why():
    with pytest.raises(SEMUnsupported, match="MAE has no projector"):
        make_sem_twin("mae", MAE)
    with pytest.raises(SEMUnsupported, match="linear evaluation"):
        make_sem_twin("linear", LinearModel)

    class Opted(BaseMethod):
        contract = Contract(sem_unsupported="its head reads the backbone tokens")

    with pytest.raises(SEMUnsupported, match="backbone tokens"):
        make_sem_twin("opted", Opted)

    class NoHead(BaseMethod):
        pass

    with pytest.raises(SEMUnsupported, match="no `projector` or `head`"):
        make_sem_twin("nohead", NoHead)(
            tiny_cfg("nohead_sem", {"sem": {"num_simplices": L, "simplex_dim": V}})
        )


PAPER_TABLE1 = {  # method: (tau_online, tau_target), SEM paper, App. C, Tabs. 7-13
    "simclr": (0.17, 0.78),
    "mocov2plus": (0.04, 0.01),
    "byol": (1.0, 1.0),
    "swav": (0.85, 1.5),
    "dino": (1.0, 1.0),
    "barlow_twins": (1.0, 0.99),
    "vicreg": (1.0, 1.0),
}


@pytest.mark.parametrize("method", list(PAPER_TABLE1))
def test_launch_config_composes_parses_and_builds(method):
    """scripts/pretrain/cifar/<method>_sem.yaml through Hydra and solo-learn's parse_cfg (tiny
    backbone/L)."""
    from hydra import compose, initialize_config_dir
    from solo.args.pretrain import parse_cfg

    config_dir = str((Path(__file__).parents[2] / "scripts" / "pretrain" / "cifar").resolve())
    overrides = [
        "backbone.name=cp_resnet8",
        "+backbone.kwargs.width=8",
        "method_kwargs.sem.num_simplices=4",
    ]
    with initialize_config_dir(config_dir=config_dir, version_base="1.2"):
        cfg = compose(config_name=f"{method}_sem.yaml", overrides=overrides)
    OmegaConf.set_struct(cfg, False)  # as solo-learn's main_pretrain.py does
    cfg = parse_cfg(cfg)
    assert (cfg.method, cfg.data.num_large_crops, cfg.method_kwargs.sem.simplex_dim) == (
        f"{method}_sem",
        2,
        13,
    )
    model = METHODS[cfg.method](cfg)
    online, momentum = slot_embedders(model)
    assert (online.tau, cfg.method_kwargs.sem.tau_target) == PAPER_TABLE1[method]
    assert momentum is None or momentum.tau == PAPER_TABLE1[method][1]
    assert model.classifier.in_features == 4 * 13  # the YAMLs probe the SEM representation


class ForgetsProjectorInOptimiser(SimCLR):
    """The official SwAV+SEM bug (its sdswav.py leaves the embedder out of the optimiser)."""

    @property
    def learnable_params(self):
        return BaseMethod.learnable_params.fget(self)


class ForgetsMomentumProjector(BYOL):
    @property
    def momentum_pairs(self):
        return BaseMomentumMethod.momentum_pairs.fget(self)


class ProjectorNotFromFeaturesDim(SimCLR):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.projector = torch.nn.Linear(7, 8)


@pytest.mark.parametrize(
    "method_cls, base, message",
    [
        (ForgetsProjectorInOptimiser, "simclr", "not in learnable_params"),
        (ForgetsMomentumProjector, "byol", "not in momentum_pairs"),
        (ProjectorNotFromFeaturesDim, "simclr", "not built from features_dim"),
    ],
)
def test_twins_refuse_methods_that_would_leave_sem_untrained_or_unfed(method_cls, base, message):
    twin = make_sem_twin("custom", method_cls)
    with pytest.raises(SEMUnsupported, match=message):
        twin(sem_cfg(base))


@pytest.mark.parametrize(
    "method",
    [m for m in declared_methods() if method_contract(METHODS[m]).kwargs is not None],
)
def test_a_misspelt_method_kwarg_of_our_methods_and_their_twins_is_refused(method):
    check_a_misspelt_method_kwarg_is_refused(method)


def test_a_solo_learn_methods_twin_takes_its_own_keys():
    cfg = sem_cfg("simclr")
    assert "temperature" in cfg.method_kwargs  # filled by nobody of ours, read by SimCLR
    METHODS["simclr_sem"](cfg)
