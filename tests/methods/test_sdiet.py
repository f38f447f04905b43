import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import json
import math
import os

import numpy as np
import torch
from lightning.pytorch import Callback
from omegaconf import OmegaConf
from solo.methods import METHODS
from solo.methods.base import BaseMethod
from torch.utils.data import DataLoader

import solo_diet
from solo_diet.core.errors import ConfigError
from solo_diet.core.sdiet.optim import adamw_row_step, sgdw_row_step
from solo_diet.core.sdiet.samplers import SuperBatchSampler
from solo_diet.methods.checkpoint import PretrainedCheckpoint
from solo_diet.methods.contract import method_contract, parse_method_kwargs
from solo_diet.methods.sdiet import CHECKPOINT_KEY, SDIET
from tests._helpers.tiny import (
    batch_of,
    fake_pretrain_loader,
    fake_val_loader,
    tiny_cfg,
    tiny_trainer,
)

pytestmark = pytest.mark.solo

N = 16
IMAGES = torch.randn(N, 3, 32, 32, generator=torch.Generator().manual_seed(1))
TARGETS = torch.randint(0, 5, (N,), generator=torch.Generator().manual_seed(2))


def first_adamw_step(rows: torch.Tensor, grad: torch.Tensor, lr: float, wd: float) -> torch.Tensor:
    """The rows after their first AdamW step (zero moments), torch's defaults for betas and eps."""
    zero = torch.zeros_like(rows)
    return adamw_row_step(
        rows, zero, zero, grad, lr=lr, weight_decay=wd, betas=(0.9, 0.999), eps=1e-8
    )[0]


def sdiet_cfg(**method_kwargs):
    kwargs = {"num_samples": N, "proj_hidden_dim": 16, "proj_output_dim": 8, **method_kwargs}
    return tiny_cfg("sdiet", kwargs, num_large_crops=1)


def deterministic(cfg):
    """No random augmentation and a fixed data order, so that two runs see identical batches."""
    cfg.augmentations[0].rrc.enabled = False
    cfg.augmentations[0].horizontal_flip.prob = 0.0
    return cfg


def test_registered():
    assert "sdiet" in solo_diet.register()
    import solo.methods

    assert METHODS["sdiet"] is solo.methods.SDIET
    assert method_contract(METHODS["sdiet"]).uses_sample_indexes


def test_forward_keys_shapes_and_head_outside_the_module():
    cfg = sdiet_cfg()
    model = METHODS["sdiet"](cfg)
    out = model(batch_of(cfg, batch_size=4)[1][0])
    assert out["feats"].shape == (4, 8) and out["logits"].shape == (4, cfg.data.num_classes)
    assert out["z"].shape == (4, 8)
    torch.testing.assert_close(out["z"].norm(dim=1), torch.ones(4))
    assert [m.__class__.__name__ for m in model.projector] == [
        "Linear",
        "BatchNorm1d",
        "ReLU",
        "Linear",
        "BatchNorm1d",
        "ReLU",
        "Linear",
    ]
    assert model.row_store.tables["rows"].shape == (N, 8)
    names = {name for name, _ in model.named_parameters()} | set(model.state_dict())
    assert not any("row" in name or "head" in name for name in names)
    learnable = {id(p) for group in model.learnable_params for p in group["params"]}
    assert all(id(p) in learnable for p in model.projector.parameters())


def test_defaults_follow_the_optimizer_config():
    cfg = sdiet_cfg()
    cfg.optimizer.weight_decay = 0.05
    cfg.optimizer.kwargs = {"betas": [0.8, 0.99], "eps": 1e-6}
    kwargs = parse_method_kwargs(cfg, METHODS["sdiet"])
    assert (
        kwargs.head_weight_decay == 0.05
        and kwargs.head_betas == (0.8, 0.99)
        and kwargs.head_eps == 1e-6
    )
    assert (
        kwargs.label_smoothing == 0.8
        and kwargs.zero_grad_steps == "eager"
        and kwargs.row_placement == "cpu"
    )
    assert kwargs.proj_layers == 3 and kwargs.rows_per_step == 1 and kwargs.temperature == 1.0


@pytest.mark.parametrize("head_optimizer", ["adamw", "sgdw"])
def test_training_step_updates_only_the_batch_rows_by_hand(head_optimizer):
    """Head gradient = (P - Q).T z / B, one row step with the configured lr, no zero-grad
    steps outside a Trainer (eager_steps is set at train start)."""
    cfg = sdiet_cfg(head_optimizer=head_optimizer, label_smoothing=0.5)
    model = METHODS["sdiet"](cfg)
    model.eval()  # BatchNorm with running stats: the reference forward below sees the same z
    indexes, views, targets = batch_of(cfg, batch_size=4, num_samples=N)
    before = model.row_store.state_dict()
    with torch.no_grad():
        z = model(views[0])["z"].double()
    loss = model.training_step([indexes, views, targets], 0)
    assert torch.isfinite(loss)

    rows = before["rows"][indexes].double()
    probs = torch.softmax(z @ rows.T, dim=1)
    target = 0.5 * torch.eye(4, dtype=torch.float64) + 0.5 / 4
    grad = (probs - target).T @ z / 4
    wd = cfg.method_kwargs.head_weight_decay
    if head_optimizer == "adamw":
        expected = first_adamw_step(rows, grad, cfg.optimizer.lr, wd)
    else:
        expected = sgdw_row_step(
            rows, torch.zeros_like(rows), grad, lr=cfg.optimizer.lr, weight_decay=wd, momentum=0.9
        )[0]
    after = model.row_store.state_dict()["rows"]  # waits for the asynchronous write-back
    torch.testing.assert_close(after[indexes].double(), expected, rtol=1e-5, atol=1e-6)
    untouched = torch.ones(N, dtype=torch.bool)
    untouched[indexes] = False
    assert torch.equal(after[untouched], before["rows"][untouched])
    assert model.row_store.global_step == 1


def test_multi_batch_ce_steps_every_resident_row_like_a_full_table_adamw():
    """m = 2, lazy: each batch is scored against the 2B rows of its super-batch (target: the
    sample's position among them, smoothing over 2B classes) and every resident row takes a real
    step; absent rows zero-gradient steps. Reference: float64 full-table AdamW (psi = 1) with the
    closed-form gradient (P - Q)^T z / B on the resident rows and 0 elsewhere."""
    smoothing, m, batch = 0.5, 2, 4
    cfg = sdiet_cfg(rows_per_step=m, zero_grad_steps="lazy", label_smoothing=smoothing)
    model = METHODS["sdiet"](cfg)
    model.eval()
    model.super_batch_sampler = sampler = SuperBatchSampler(N, batch, m, seed=5)
    theta = model.row_store.state_dict()["rows"].double()
    first, second = torch.zeros_like(theta), torch.zeros_like(theta)
    lr, wd = cfg.optimizer.lr, cfg.method_kwargs.head_weight_decay
    batches = sampler.global_batches()
    for step, idx in enumerate(batches):
        with torch.no_grad():
            z = model(IMAGES[idx])["z"].double()
        model.training_step([idx, [IMAGES[idx]], TARGETS[idx]], step)
        place = step % m
        group = batches[step - place : step - place + m].flatten()
        probs = torch.softmax(z @ theta[group].T, dim=1)
        target = torch.full((batch, m * batch), smoothing / (m * batch), dtype=torch.float64)
        target[torch.arange(batch), place * batch + torch.arange(batch)] += 1 - smoothing
        grad = torch.zeros_like(theta)
        grad[group] = (probs - target).T @ z / batch
        first = 0.9 * first + 0.1 * grad
        second = 0.999 * second + 0.001 * grad * grad
        theta = (1 - lr * wd) * theta - lr * first / (second.sqrt() + 1e-8)
    assert model.row_store.global_step == len(batches) == 4
    rows, _ = model.row_store.load(torch.arange(N), "cpu", lr=lr)
    torch.testing.assert_close(rows.double(), theta, rtol=1e-5, atol=1e-6)


def fit_in_sampler_order(cfg, max_epochs, limit_train_batches, batch_sampler=None):
    """Trains through Lightning on the launcher's DataLoader (SDIET.train_batch_sampler) or on
    ``batch_sampler``; deterministic data, so runs with the same order see identical batches."""
    torch.manual_seed(0)
    deterministic(cfg)
    dataset = fake_pretrain_loader(cfg, num_samples=N).dataset
    sampler = batch_sampler or METHODS["sdiet"].train_batch_sampler(cfg, dataset)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=0)
    model, trainer = train_steps(cfg, max_epochs, limit_train_batches=limit_train_batches)
    trainer.fit(model, loader)
    return model


def test_rows_per_step_1_through_the_sampler_equals_batch_ce_in_the_same_order():
    cfg = sdiet_cfg()
    through_sampler = fit_in_sampler_order(cfg, 1, 3)
    assert isinstance(through_sampler.super_batch_sampler, SuperBatchSampler)
    order = METHODS["sdiet"].train_batch_sampler(cfg, range(N)).global_batches().tolist()
    plain = fit_in_sampler_order(sdiet_cfg(), 1, 3, batch_sampler=order)
    assert plain.super_batch_sampler is None
    assert through_sampler.row_store.eager_steps == plain.row_store.eager_steps == N / 4 - 1
    for name, value in plain.row_store.state_dict().items():
        got = through_sampler.row_store.state_dict()[name]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value
    for (name, a), b in zip(plain.state_dict().items(), through_sampler.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("mode,placement", [("lazy", "cpu"), ("eager", "gpu")])
def test_multi_batch_through_lightning_and_prefetch_changes_nothing(mode, placement):
    """m = 2, 2 epochs of 3 steps (a full super-batch, then one cut short by the epoch end): rows
    stay resident for their super-batch, and training with and without prefetching the next
    super-batch (which also crosses an epoch boundary) gives identical tables and weights."""
    runs = {}
    for prefetch in (True, False):
        cfg = sdiet_cfg(
            rows_per_step=2, zero_grad_steps=mode, row_placement=placement, prefetch=prefetch
        )
        runs[prefetch] = fit_in_sampler_order(cfg, 2, 3)
    model = runs[True]
    assert model.row_store.global_step == 6 and model.row_store.eager_steps == N / 4 - 2
    expected_last = torch.full((N,), -1)
    for epoch in range(2):
        model.super_batch_sampler.set_epoch(epoch)
        batches = model.super_batch_sampler.global_batches()
        expected_last[batches[:2].flatten()] = 3 * epoch + 1
        expected_last[batches[2]] = 3 * epoch + 2
    assert torch.equal(model.row_store.state_dict()["last_step"], expected_last)
    for name, value in runs[False].row_store.state_dict().items():
        got = model.row_store.state_dict()[name]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value
    for (name, a), b in zip(runs[False].state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name


def test_multi_batch_without_the_sampler_is_refused():
    cfg = sdiet_cfg(rows_per_step=2)
    model, trainer = train_steps(cfg, 1, limit_train_batches=1)
    with pytest.raises(ConfigError, match="SuperBatchSampler") as raised:
        trainer.fit(model, fake_pretrain_loader(cfg, num_samples=N))
    assert str(raised.value).startswith("`method_kwargs.rows_per_step` > 1 needs")


def test_the_batch_order_hook_refuses_a_bad_rows_per_step_naming_the_key():
    """The launcher builds the sampler before the model parses its kwargs: one line, no stack."""
    with pytest.raises(ConfigError, match=r"^`method_kwargs.rows_per_step` must be a positive"):
        method_contract(SDIET).train_batch_sampler(sdiet_cfg(rows_per_step=0), range(N))


def test_a_batch_out_of_the_samplers_order_is_refused():
    """With the SuperBatchSampler the rows come from its order; a batch that is not its batch fails
    (on a CUDA device one step later, without a host sync; here at once)."""
    model = METHODS["sdiet"](sdiet_cfg())
    model.super_batch_sampler = sampler = SuperBatchSampler(N, 4, seed=5)
    expected = sampler.global_batches()[0]
    model.training_step([expected, [IMAGES[expected]], TARGETS[expected]], 0)
    wrong = sampler.global_batches()[2]
    with pytest.raises(RuntimeError, match="not the SuperBatchSampler's batch"):
        model.training_step([wrong, [IMAGES[wrong]], TARGETS[wrong]], 1)


def test_duplicate_indices_are_refused():
    cfg = sdiet_cfg()
    model = METHODS["sdiet"](cfg)
    indexes, views, targets = batch_of(cfg, batch_size=4, num_samples=N)
    indexes[1] = indexes[0]
    with pytest.raises(ValueError, match="distinct"):
        model.training_step([indexes, views, targets], 0)


@pytest.mark.parametrize("mode,placement", [("eager", "cpu"), ("lazy", "gpu")])
def test_fast_dev_run_through_solo_pipeline(mode, placement):
    cfg = sdiet_cfg(zero_grad_steps=mode, row_placement=placement)
    model = METHODS["sdiet"](cfg)
    trainer = tiny_trainer(cfg)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=N), fake_val_loader(cfg))
    loss = trainer.callback_metrics["train_sdiet_loss"]
    assert math.log(4) - 0.5 < float(loss) < math.log(4) + 0.5
    assert model.row_store.global_step == 1
    assert model.row_store.eager_steps == N / 4 - 1


@pytest.mark.parametrize("labels", ["index", "class", "mix", "groups"])
def test_each_label_source_builds_and_fits_a_fast_dev_run(labels, tmp_path):
    """One head row per label id (N, C, C + N, G rows); a fast_dev_run trains a batch on them."""
    groups_path = tmp_path / "groups.npy"
    np.save(groups_path, np.arange(N) % 3)
    cfg = sdiet_cfg(labels=labels, groups_path=str(groups_path) if labels == "groups" else None)
    model = METHODS["sdiet"](cfg)
    assert cfg.method_kwargs.zero_grad_steps == ("eager" if labels == "index" else "lazy")
    num_rows = {"index": N, "class": 5, "mix": 5 + N, "groups": 3}[labels]
    assert model.label_source.num_rows == num_rows and model.row_store.tables["rows"].shape == (
        num_rows,
        8,
    )
    before = model.row_store.state_dict()["rows"].clone()
    trainer = tiny_trainer(cfg)
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=N), fake_val_loader(cfg))
    assert torch.isfinite(trainer.callback_metrics["train_sdiet_loss"])
    assert model.row_store.global_step == 1
    moved = (model.row_store.state_dict()["rows"] != before).any(dim=1)
    assert 0 < int(moved.sum()) <= min(4, num_rows)


def test_class_labels_give_the_multi_positive_loss_and_step_their_rows():
    """labels=class: the batch's distinct classes are the rows; a datum's positive is its class row
    (two data share one), unlabelled data (-1) add nothing. Reference: float64 mean over the
    labelled data of -sum_k q_jk log softmax(z_j . W_k), q = (1 - eps) one-hot + eps / M, and one
    AdamW step of the class rows with its autograd gradient; an all-unlabelled batch gives a zero
    loss and ages the rows a step."""
    smoothing = 0.4
    cfg = sdiet_cfg(labels="class", label_smoothing=smoothing)
    model = METHODS["sdiet"](cfg)
    model.eval()
    indexes = torch.tensor([3, 7, 1, 12, 9])
    targets = torch.tensor([4, 1, 4, -1, 0])
    images = IMAGES[indexes]
    before = model.row_store.state_dict()
    with torch.no_grad():
        z = torch.nn.functional.normalize(model(images)["z"].double(), dim=1)
    probe = BaseMethod.training_step(model, [indexes, [images], targets], 0)["loss"]
    loss = model.training_step([indexes, [images], targets], 0) - probe

    classes = [0, 1, 4]
    theta = before["rows"][classes].double().requires_grad_(True)
    log_probs = torch.log_softmax(z[[0, 1, 2, 4]] @ theta.T, dim=1)
    target = torch.full((4, 3), smoothing / 3, dtype=torch.float64)
    target[torch.arange(4), torch.tensor([2, 1, 2, 0])] += 1 - smoothing
    reference = -(target * log_probs).sum(dim=1).mean()
    torch.testing.assert_close(loss.double(), reference.detach(), rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(reference, theta)
    wd = cfg.method_kwargs.head_weight_decay
    expected = first_adamw_step(theta.detach(), grad, cfg.optimizer.lr, wd)
    after = model.row_store.state_dict()
    torch.testing.assert_close(after["rows"][classes].double(), expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(after["rows"][[2, 3]], before["rows"][[2, 3]])
    assert torch.equal(after["last_step"], torch.tensor([0, 0, -1, -1, 0]))

    unlabelled = torch.full_like(targets, -1)
    assert float(model.training_step([indexes, [images], unlabelled], 1).detach()) == 0.0
    assert model.row_store.global_step == 2 and torch.equal(
        model.row_store.state_dict()["rows"], after["rows"]
    )


@pytest.mark.parametrize(
    "kwargs,keys",
    [
        (
            {"labels": "class", "zero_grad_steps": "eager"},
            ["zero_grad_steps=eager", "labels=class"],
        ),
        ({"labels": "mix", "rows_per_step": 2}, ["rows_per_step", "labels=mix"]),
    ],
)
def test_class_rows_refuse_eager_steps_and_multi_batch(kwargs, keys):
    with pytest.raises(ConfigError) as error:
        METHODS["sdiet"](sdiet_cfg(**kwargs))
    assert all(key in str(error.value) for key in keys)


def train_steps(cfg, max_epochs, **kwargs):
    model = METHODS["sdiet"](cfg)
    trainer = tiny_trainer(
        cfg, fast_dev_run=False, limit_val_batches=0, max_epochs=max_epochs, **kwargs
    )
    return model, trainer


def test_eager_and_lazy_train_differently():
    tables = {}
    for mode in ("eager", "lazy"):
        torch.manual_seed(0)
        cfg = deterministic(sdiet_cfg(zero_grad_steps=mode))
        model, trainer = train_steps(cfg, 1, limit_train_batches=3)
        trainer.fit(model, fake_pretrain_loader(cfg, num_samples=N, shuffle=False))
        tables[mode] = model.row_store.state_dict()
    assert tables["eager"]["global_step"] == tables["lazy"]["global_step"] == 3
    assert (tables["eager"]["rows"] - tables["lazy"]["rows"]).abs().max() > 1e-5
    assert torch.equal(tables["lazy"]["last_step"][:12], torch.arange(3).repeat_interleave(4))


class StopAfterFirstEpoch(Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        trainer.should_stop = True


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_stop_and_resume_equals_uninterrupted_run(tmp_path, mode):
    def fresh():
        torch.manual_seed(0)
        cfg = deterministic(sdiet_cfg(zero_grad_steps=mode))
        return cfg, fake_pretrain_loader(cfg, num_samples=N, shuffle=False)

    cfg, loader = fresh()
    straight, trainer = train_steps(cfg, 2, limit_train_batches=2)
    trainer.fit(straight, loader)

    cfg, loader = fresh()
    first, trainer = train_steps(cfg, 2, limit_train_batches=2, callbacks=[StopAfterFirstEpoch()])
    trainer.fit(first, loader)
    ckpt = tmp_path / "half.ckpt"
    trainer.save_checkpoint(ckpt)
    assert CHECKPOINT_KEY in torch.load(ckpt, weights_only=False)

    cfg, loader = fresh()
    resumed, trainer = train_steps(cfg, 2, limit_train_batches=2)
    trainer.fit(resumed, loader, ckpt_path=str(ckpt))

    assert (
        first.row_store.global_step == 2
        and resumed.row_store.global_step == straight.row_store.global_step == 4
    )
    for name, value in straight.row_store.state_dict().items():
        got = resumed.row_store.state_dict()[name]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert not torch.equal(
        first.row_store.state_dict()["rows"], straight.row_store.state_dict()["rows"]
    )


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"num_samples": None}, "num_samples"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"head_optimizer": "lamb"}, "head_optimizer"),
        ({"head_betas": [0.9]}, "head_betas"),
        ({"zero_grad_steps": "never"}, "zero_grad_steps"),
        ({"row_placement": "tape"}, "method_kwargs.row_placement"),
        ({"row_placement": "disk"}, "row_dir"),
        ({"rows_per_step": 0}, "rows_per_step"),
        ({"prefetch": "yes"}, "prefetch"),
        ({"temperature": 0.0}, "temperature"),
        ({"row_sharding": "host"}, "method_kwargs.row_sharding"),
    ],
)
def test_invalid_config_names_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        METHODS["sdiet"](sdiet_cfg(**kwargs))


def test_two_views_are_refused():
    cfg = tiny_cfg("sdiet", {"num_samples": N}, num_large_crops=2)
    with pytest.raises(ConfigError, match="num_large_crops"):
        METHODS["sdiet"](cfg)


def _epoch_by_hand(rows_per_step, num_replicas=1, rank=0):
    """One epoch of training steps (global batch 8) in a SuperBatchSampler's order, in eval mode
    (BatchNorm uses running stats, so a sample's z does not depend on which rank it sits on);
    returns the model after the epoch-end synchronisation and the parameter gradients summed over
    the steps."""
    cfg = sdiet_cfg(rows_per_step=rows_per_step, zero_grad_steps="lazy")
    torch.manual_seed(0)
    model = METHODS["sdiet"](cfg)
    model.eval()
    sampler = SuperBatchSampler(
        N, 8 // num_replicas, rows_per_step, seed=3, num_replicas=num_replicas, rank=rank
    )
    model.super_batch_sampler = sampler
    for step, batch in enumerate(sampler):
        idx = torch.tensor(batch)
        model.training_step([idx, [IMAGES[idx]], TARGETS[idx]], step).backward()
    model.on_train_epoch_end()
    return model, {
        name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
    }


def _ddp_worker(rank, world_size, init_file, out_dir):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    explicit = SuperBatchSampler(N, 8 // world_size, 2, seed=3, num_replicas=world_size, rank=rank)
    result = {
        "split_from_the_process_group": list(SuperBatchSampler(N, 8 // world_size, 2, seed=3))
        == list(explicit)
    }
    for rows_per_step in (1, 2):
        model, grads = _epoch_by_hand(rows_per_step, world_size, rank)
        for grad in grads.values():  # what DDP does to the gradients
            dist.all_reduce(grad)
            grad /= world_size
        store = model.row_store
        result[rows_per_step] = {
            "table": store.state_dict(),
            "grads": grads,
            "writer": store.writer,
            "files": list(store.shared_files),
            "files_left": [f for f in store.shared_files if os.path.exists(f)],
        }
    torch.save(result, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_ddp_shares_one_host_store_and_equals_one_process(tmp_path):
    """2 gloo processes, rows on cpu, m = 1 and m = 2: one store file set in /dev/shm mapped by both
    (written only by rank 0, unlinked once mapped), and rank 1, which never writes, sees the same
    head table as one process trained on the global batches."""
    import torch.multiprocessing as mp

    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    assert all(r["split_from_the_process_group"] for r in ranks)
    tables = {}
    for rows_per_step in (1, 2):
        model, grads = _epoch_by_hand(rows_per_step)
        assert model.row_store.sharing is None
        tables[rows_per_step] = expected = model.row_store.state_dict()
        got = [r[rows_per_step] for r in ranks]
        assert [g["writer"] for g in got] == [True, False]
        assert got[0]["files"] == got[1]["files"] and len(got[0]["files"]) == 2  # table, last_step
        assert all(f.startswith("/dev/shm/") for f in got[0]["files"])
        assert got[0]["files_left"] == got[1]["files_left"] == []
        for g in got:
            assert g["table"]["global_step"] == expected["global_step"] == 2
            assert torch.equal(g["table"]["last_step"], expected["last_step"])
            for name in ("rows", "exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(
                    g["table"][name], expected[name], rtol=0, atol=1e-5, msg=name
                )
            assert g["grads"].keys() == grads.keys()
            for name, grad in grads.items():
                torch.testing.assert_close(g["grads"][name], grad, rtol=1e-4, atol=1e-5, msg=name)
    assert (tables[1]["rows"] - tables[2]["rows"]).abs().max() > 1e-5


@pytest.mark.parametrize("folder", ["cifar", "imagenet-100", "custom"])
def test_shipped_configs_build_the_paper_recipe(folder, tmp_path):
    from solo.args.pretrain import parse_cfg

    from solo_diet.launch.common import compose_cfg, normalize_devices

    overrides = [f"data.train_path={tmp_path}"] if folder == "custom" else []
    cfg = compose_cfg(f"scripts/pretrain/{folder}", "sdiet.yaml", overrides)
    normalize_devices(cfg)
    cfg = parse_cfg(cfg)
    cfg.method_kwargs.num_samples = 100
    model = METHODS[cfg.method](cfg)
    assert (
        cfg.optimizer.name == "adamw"
        and cfg.optimizer.lr == 1e-3
        and cfg.optimizer.weight_decay == 0.05
    )
    assert cfg.optimizer.batch_size == 256 and cfg.augmentations[0].num_crops == 1
    assert cfg.augmentations[0].random_erasing.prob == 0.25
    kwargs = cfg.method_kwargs
    assert (
        kwargs.label_smoothing == 0.8
        and kwargs.head_weight_decay == 0.05
        and list(kwargs.head_betas) == [0.9, 0.999]
    )
    assert model.row_store.tables["rows"].shape == (100, 2048)
    assert [
        layer.out_features for layer in model.projector if isinstance(layer, torch.nn.Linear)
    ] == [2048] * 3


class EpochLosses(Callback):
    def __init__(self):
        self.losses = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_sdiet_loss_epoch"]))


@pytest.mark.training
@pytest.mark.slow
def test_training_lowers_the_batch_ce():
    """Real training through Lightning (batch 8 of 16 noise images, temperature 0.1 so that 15
    epochs suffice): the epoch-mean s-DIET loss falls far below its initial value (about ln 8 / 0.1
    scale). Seeds 0-5 at 1 and 2 threads end at 0.13-0.17 of the first epoch's loss."""
    torch.manual_seed(0)
    cfg = deterministic(sdiet_cfg(label_smoothing=0.0, temperature=0.1))
    cfg.backbone.kwargs.width = 16
    cfg.optimizer.lr = 3e-3
    cfg.optimizer.batch_size = 8
    model = METHODS["sdiet"](cfg)
    losses = EpochLosses()
    train_steps(cfg, 15, callbacks=[losses])[1].fit(model, fake_pretrain_loader(cfg, num_samples=N))
    assert losses.losses[0] > 1.5
    assert min(losses.losses[-3:]) < 0.3 * losses.losses[0], losses.losses


class KeepModel(Callback):
    def on_train_end(self, trainer, pl_module):
        self.model, self.use_distributed_sampler = (
            pl_module,
            trainer._accelerator_connector.use_distributed_sampler,
        )


def test_launcher_trains_multi_batch_ce_on_the_methods_batch_sampler(tmp_path):
    from pathlib import Path

    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.pretrain import run_pretrain
    from tests._helpers.synthetic import write_image_folder

    write_image_folder(tmp_path / "train", num_classes=2, per_class=8)
    overrides = [
        f"data.train_path={tmp_path / 'train'}",
        "data.val_path=null",
        "data.num_workers=0",
        f"++checkpoint.dir={tmp_path / 'runs'}",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "max_epochs=1",
        "accelerator=cpu",
        "devices=1",
        "precision=32",
        "++limit_train_batches=3",
        "++enable_progress_bar=False",
        "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8",
        "augmentations.0.crop_size=32",
        "optimizer.batch_size=4",
        "method_kwargs.proj_hidden_dim=16",
        "method_kwargs.proj_output_dim=8",
        "method_kwargs.rows_per_step=2",
    ]
    scripts = Path(__file__).resolve().parents[2] / "scripts" / "pretrain" / "custom"
    keep = KeepModel()
    run_pretrain(compose_cfg(str(scripts), "sdiet.yaml", overrides), extra_callbacks=[keep])
    sampler = keep.model.super_batch_sampler
    assert (
        isinstance(sampler, SuperBatchSampler)
        and sampler.rows_per_step == 2
        and sampler.num_samples == 16
    )
    assert keep.use_distributed_sampler is False
    assert keep.model.row_store.global_step == 3 and keep.model.row_store.eager_steps == 16 / 4 - 2


@pytest.mark.slow
def test_lightning_ddp_two_processes_equal_one_process_in_float64(tmp_path):
    """Through Lightning DDP (2 gloo processes, shared host store) s-DIET computes exactly what one
    process computes on the same global batches: in float64 the loss, rows and AdamW state agree to
    ~1e-13."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sdiet_ddp_equivalence.py"
    done = subprocess.run(
        [sys.executable, str(script), "--accelerator", "cpu", "--float64"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    gaps = {
        line.split("|")[1].strip(): float(line.split("|")[2])
        for line in done.stdout.splitlines()
        if line.startswith("| ") and "e-" in line
    }
    assert len(gaps) == 7, (
        done.stdout
    )  # loss, rows after step 1, rows, 2 AdamW states, backbone, projector
    assert all(gap <= 1e-10 for gap in gaps.values()), gaps


OLD_KEY_VALUES = {"storage": "cpu", "storage_dir": "/tmp/rows", "storage_dtype": "float32"}


@pytest.mark.parametrize(
    "old, new",
    [("storage", "row_placement"), ("storage_dir", "row_dir"), ("storage_dtype", "row_dtype")],
)
def test_an_old_head_row_key_is_refused_naming_its_new_key(old, new):
    """``storage`` names the GPU data path's images (``data.gpu.storage``); the head rows' keys are
    ``row_placement``, ``row_dir`` and ``row_dtype``."""
    assert SDIET.renamed_method_kwargs[old] == new
    with pytest.raises(
        ConfigError, match=rf"`method_kwargs.{old}` was renamed `method_kwargs.{new}`"
    ):
        METHODS["sdiet"](sdiet_cfg(**{old: OLD_KEY_VALUES[old]}))


def test_a_checkpoint_saved_with_the_old_head_row_keys_loads(tmp_path):
    cfg = sdiet_cfg(row_placement="disk", row_dir=str(tmp_path / "rows"), row_dtype="float64")
    model = METHODS["sdiet"](cfg)
    args = OmegaConf.to_container(model.cfg)
    for old, new in SDIET.renamed_method_kwargs.items():  # args.json as it was written before
        args["method_kwargs"][old] = args["method_kwargs"].pop(new)
    (tmp_path / "args.json").write_text(json.dumps(args))
    checkpoint = tmp_path / "sdiet-ep=0.ckpt"
    torch.save({"epoch": 0, "state_dict": model.state_dict()}, checkpoint)

    for pretrained in (
        PretrainedCheckpoint(checkpoint),  # args.json next to it
        PretrainedCheckpoint(checkpoint, tmp_path / "args.json"),
    ):
        kwargs = pretrained.args.method_kwargs
        assert not set(kwargs) & set(SDIET.renamed_method_kwargs)
        assert (kwargs.row_placement, kwargs.row_dir, kwargs.row_dtype) == (
            "disk",
            str(tmp_path / "rows"),
            "float64",
        )
    loaded = pretrained.method()
    assert loaded.hp == model.hp
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
