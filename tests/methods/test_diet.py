import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from solo.methods import METHODS

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.core.losses import diet_loss
from tests._helpers.tiny import (
    batch_of,
    fake_pretrain_loader,
    fake_val_loader,
    tiny_cfg,
    tiny_trainer,
)

pytestmark = pytest.mark.solo


def diet_cfg(**method_kwargs):
    kwargs = {"num_samples": 32, **method_kwargs}
    return tiny_cfg("diet", kwargs, num_large_crops=1)


def test_registered_and_idempotent():
    first = solo_diet.register()
    second = solo_diet.register()
    assert "diet" in first and first == second
    import solo.methods

    assert METHODS["diet"] is solo.methods.DIET


@pytest.mark.parametrize("proj_layers", [0, 2])
def test_forward_keys_and_shapes(proj_layers):
    cfg = diet_cfg(proj_layers=proj_layers, proj_hidden_dim=16, proj_output_dim=12)
    model = METHODS["diet"](cfg)
    indexes, views, _ = batch_of(cfg, batch_size=4)
    out = model(views[0])
    assert out["feats"].shape == (4, 8)
    assert out["logits"].shape == (4, cfg.data.num_classes)
    head_dim = 12 if proj_layers else 8
    assert out["z"].shape == (4, head_dim)
    assert model.head.weight.shape == (32, head_dim) and model.head.bias is None


def test_normalize_puts_z_on_sphere():
    model = METHODS["diet"](diet_cfg(normalize=True))
    z = model(torch.randn(4, 3, 32, 32))["z"]
    torch.testing.assert_close(z.norm(dim=1), torch.ones(4))


def test_head_logits_are_float32_under_bf16_autocast():
    """The R-way logits skip bf16 (as CPLearn's code logits): float32, equal to a float32 product
    (within float32 rounding of the float64 reference), where the plain head gives bf16."""
    model = METHODS["diet"](diet_cfg())
    z = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    reference = (z.double() @ model.head.weight.double().T).float()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model.head_logits(z)
        assert model.head(z).dtype == torch.bfloat16  # what autocast alone would give
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("loss", ["ce", "mse"])
def test_fast_dev_run_through_solo_pipeline(loss):
    cfg = diet_cfg(loss=loss)
    model = METHODS["diet"](cfg)
    trainer = tiny_trainer(cfg)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=32), fake_val_loader(cfg))
    logged = trainer.callback_metrics
    assert torch.isfinite(logged["train_diet_loss"]) and "train_instance_acc" in logged


@pytest.mark.training
def test_training_fits_instances():
    """Real training through Lightning: the DIET loss on the training images falls and the head
    learns to tell the 8 images apart. At lr 3e-3 every run we tried (seeds 0-7 at 1 and 2
    threads, 0-5 at 4) ends at a loss ratio of 0.005-0.13 with 8/8 images told apart; lr 1e-2 was
    unstable (ratios 0.02-0.94), so the margins below are 3x and 2 images."""
    torch.manual_seed(0)
    cfg = diet_cfg(label_smoothing=0.0, num_samples=8)
    cfg.backbone.kwargs.width = 32
    cfg.optimizer.lr = 3e-3
    cfg.max_epochs = 40
    cfg.augmentations[0].rrc.enabled = False  # noise images: the identity view must be learnable
    cfg.augmentations[0].horizontal_flip.prob = 0.0
    model = METHODS["diet"](cfg)
    loader = fake_pretrain_loader(cfg, num_samples=8, shuffle=False)

    def loss_and_accuracy():
        model.eval()
        with torch.no_grad():
            indexes = torch.cat([batch[0] for batch in loader])
            logits = torch.cat([model.head(model(batch[1][0])["z"]) for batch in loader])
        return float(diet_loss(logits, indexes, 0.0)), float(
            (logits.argmax(1) == indexes).float().mean()
        )

    loss_before, acc_before = loss_and_accuracy()
    tiny_trainer(cfg, fast_dev_run=False, limit_val_batches=0).fit(model, loader)
    loss_after, acc_after = loss_and_accuracy()
    assert loss_after < 0.4 * loss_before, (loss_before, loss_after)
    assert acc_after >= 0.75, (acc_before, acc_after)


def test_index_out_of_range_is_refused():
    cfg = diet_cfg()
    model = METHODS["diet"](cfg)
    indexes, views, targets = batch_of(cfg, batch_size=4)
    indexes[0] = 32
    with pytest.raises(IndexError, match="num_samples"):
        model.training_step([indexes, views, targets], 0)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"num_samples": None}, "num_samples"),
        ({"num_samples": 0}, "num_samples"),
        ({"loss": "l1"}, "method_kwargs.loss"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"proj_layers": 2, "proj_hidden_dim": 0}, "proj_hidden_dim"),
        # the label source's core errors name its arguments; the method names the keys
        ({"labels": "nope"}, r"^`method_kwargs.labels` must be one of \['index'"),
        (
            {"labels": "groups"},
            r"^`method_kwargs.labels: groups` needs `method_kwargs.groups_path`",
        ),
        ({"labelled_fraction": 0.5}, r"^`method_kwargs.labelled_fraction` only applies to"),
        ({"labels": "class", "labelled_fraction": 0.0}, r"^`method_kwargs.labelled_fraction` must"),
        (
            {"labels": "groups", "groups_path": "/nowhere/g.npy"},
            r"^`method_kwargs.groups_path` '/nowhere/g.npy' is not a file",
        ),
    ],
)
def test_invalid_config_names_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        METHODS["diet"](diet_cfg(**kwargs))


def test_a_name_clash_with_solo_learn_is_refused():
    import solo.methods

    from solo_diet.methods.contract import _add

    with pytest.raises(RuntimeError, match="already has"):
        _add(solo.methods, {"simclr": METHODS["diet"]})
    assert METHODS["simclr"].__module__ == "solo.methods.simclr"


def test_online_probe_loss_is_zero_with_zero_gradient_when_nothing_is_labelled():
    """No host sync, yet an all-unlabelled batch (solo-learn's loss is NaN) trains the probe by
    nothing."""
    from solo_diet.methods._common import online_probe_loss

    classifier = torch.nn.Linear(3, 4)
    features = torch.randn(5, 3)
    for targets, labelled in (
        (torch.full((5,), -1), False),
        (torch.tensor([0, -1, 3, -1, 1]), True),
    ):
        classifier.zero_grad()
        class_loss = torch.nn.functional.cross_entropy(
            classifier(features), targets, ignore_index=-1
        )
        loss = online_probe_loss(targets, class_loss)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in classifier.parameters()])
        assert torch.isfinite(grads).all()
        if labelled:
            assert torch.equal(loss, class_loss) and grads.abs().sum() > 0
        else:
            assert (
                torch.isnan(class_loss) and float(loss.detach()) == 0.0 and grads.abs().sum() == 0
            )
