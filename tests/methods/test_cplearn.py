"""CPLearn inside solo-learn: forward outputs, a fast_dev_run through solo-learn's pipeline,
checkpoint round trip of the frozen codes, launch configs and config errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from solo.args.pretrain import parse_cfg
from solo.methods import METHODS

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.core.metrics import clustering_report
from solo_diet.core.nn import code_temperature, rademacher_codes
from tests._helpers.tiny import (
    batch_of,
    fake_pretrain_loader,
    fake_val_loader,
    tiny_cfg,
    tiny_trainer,
)

pytestmark = pytest.mark.solo

solo_diet.register()
CPLearn = METHODS["cplearn"]
SMALL = {"proj_hidden_dim": 16, "proj_output_dim": 64}
CONFIGS = Path(__file__).resolve().parents[2] / "scripts" / "pretrain" / "cifar"


def test_forward_keys_shapes_and_defaults():
    cfg = tiny_cfg("cplearn", dict(SMALL))
    model = CPLearn(cfg)
    assert cfg.method_kwargs.beta == 1.0 and cfg.method_kwargs.eps == 1e-8
    assert cfg.method_kwargs.prior == "reverse_kl" and cfg.method_kwargs.symmetric is True
    assert cfg.method_kwargs.codes_seed == cfg.seed
    out = model(torch.randn(4, 3, 32, 32))
    assert out["feats"].shape == (4, 8) and out["logits"].shape == (4, 5)
    assert out["h"].shape == (4, 16) and out["z"].shape == (4, 64)
    assert out["z"].dtype == torch.float32
    expected = (out["h"] @ rademacher_codes(16, 64, cfg.seed)) / code_temperature(16, 4, 64)
    assert torch.allclose(out["z"], expected, atol=1e-5)
    trainable = {id(p) for group in model.learnable_params for p in group["params"]}
    assert (
        id(model.projector.linear.weight) in trainable
        and id(model.projector.bn.weight) in trainable
    )
    assert "projector.codes" in model.state_dict()


def test_compare_measures_the_codes_and_the_embedding_h():
    from solo_diet.methods.cplearn import ForwardOutput

    model = CPLearn(tiny_cfg("cplearn", dict(SMALL))).eval()
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        h = model.projector.embed(model.backbone(images))
        assert ForwardOutput(model, "h")(images).shape == (4, 16)
        # Two eval passes of the same model differ by float32 rounding only: seeds 0-39 at 1 and 2
        # threads gave at most 1.2e-7 (1-2 ulps of tanh's [-1, 1]) and failed the default rtol
        # 1 to 3 times in 40 where h is near 0; atol 1e-6 is 8x that, far below any real change.
        assert torch.allclose(ForwardOutput(model, "h")(images), h, rtol=0, atol=1e-6)
        codes = (h @ model.projector.codes).argmax(1, keepdim=True)  # tau > 0 keeps the argmax
        assert torch.equal(ForwardOutput(model, "z", argmax=True)(images), codes)


def test_training_step_returns_loss_plus_probe():
    cfg = tiny_cfg("cplearn", dict(SMALL, beta=0.5, prior="forward_ce", symmetric=False))
    model = CPLearn(cfg)
    loss = model.training_step(batch_of(cfg), 0)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert model.projector.linear.weight.grad.abs().sum() > 0
    assert model.backbone.stem[0].weight.grad.abs().sum() > 0


def test_fast_dev_run_logs_diagnostics_and_checkpoint_keeps_codes(tmp_path):
    cfg = tiny_cfg("cplearn", dict(SMALL, codes_seed=11))
    model = CPLearn(cfg)
    trainer = tiny_trainer(cfg, fast_dev_run=2)
    val_loader = fake_val_loader(cfg, num_samples=8)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=16), val_loader)
    metrics = trainer.callback_metrics
    for name in (
        "loss",
        "invariance",
        "prior",
        "entropy",
        "marginal_entropy",
        "codes_used",
        "agreement",
        "max_prob",
    ):
        assert torch.isfinite(metrics[f"train_cplearn_{name}"]), name
    assert 1 <= metrics["train_cplearn_codes_used"] <= 4
    assert 0 <= metrics["train_cplearn_prior"] <= math.log(64)
    for name in ("nmi", "ami", "ari", "hungarian_acc", "codes_used", "chance_nmi"):
        assert torch.isfinite(metrics[f"val_cluster_{name}"]), name
    model.eval()
    with torch.no_grad():
        codes, labels = zip(*[(model(x)["z"].argmax(dim=1), y) for x, y in val_loader])
    expected = clustering_report(torch.cat(labels), torch.cat(codes))
    assert metrics["val_cluster_nmi"].item() == pytest.approx(expected["nmi"], abs=1e-6)
    assert metrics["val_cluster_codes_used"].item() == expected["codes_used"]

    path = tmp_path / "cplearn.ckpt"
    trainer.save_checkpoint(path)
    args = json.loads(json.dumps(OmegaConf.to_container(cfg)))  # what args.json holds
    args["method_kwargs"]["codes_seed"] = 12  # W must come from the checkpoint, not be redrawn
    restored = CPLearn.load_from_checkpoint(path, cfg=OmegaConf.create(args))
    assert torch.equal(restored.projector.codes, model.projector.codes)
    assert not torch.equal(restored.projector.codes, rademacher_codes(16, 64, 12))
    model.eval()
    restored.eval()
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(restored(images)["z"], model(images)["z"], atol=1e-6)


@pytest.mark.parametrize(
    "override, key",
    [
        ({"proj_output_dim": 0}, "method_kwargs.proj_output_dim"),
        ({"proj_hidden_dim": 2.5}, "method_kwargs.proj_hidden_dim"),
        ({"beta": -1.0}, "method_kwargs.beta"),
        ({"eps": 0.1}, "method_kwargs.eps"),
        ({"activation": "relu"}, "method_kwargs.activation"),
        ({"prior": "kl"}, "method_kwargs.prior"),
        ({"symmetric": "yes"}, "method_kwargs.symmetric"),
        ({"gather_marginal": 1}, "method_kwargs.gather_marginal"),
        ({"codes_seed": -3}, "method_kwargs.codes_seed"),
    ],
)
def test_invalid_method_kwargs_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        CPLearn(tiny_cfg("cplearn", dict(SMALL, **override)))


def test_multicrop_is_refused():
    with pytest.raises(ConfigError, match="num_small_crops"):
        CPLearn(tiny_cfg("cplearn", dict(SMALL), num_small_crops=2))


@pytest.mark.parametrize("name", ["cplearn", "cplearn_resnet8"])
def test_launch_configs_parse_and_build(name):
    overrides = [
        "method_kwargs.proj_output_dim=64",
        "method_kwargs.proj_hidden_dim=16",
        "accelerator=cpu",
        "devices=1",
        "strategy=auto",
        "precision=32",
        "checkpoint.enabled=False",
        "auto_resume.enabled=False",
    ]
    if name == "cplearn_resnet8":
        overrides.append("backbone.kwargs.width=8")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.2"):
        cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    cfg.devices = [0]
    cfg = parse_cfg(cfg)
    assert cfg.data.num_large_crops == 2 and cfg.data.num_small_crops == 0
    assert cfg.optimizer.name == "adam" and cfg.optimizer.batch_size == 64
    model = CPLearn(cfg)
    assert model.projector.codes.shape == (16, 64)
    out = model(torch.randn(2, 3, 32, 32))
    assert out["z"].shape == (2, 64)
