"""``data.format: gpu`` through solo-learn and Lightning: every registered method, the launchers,
s-DIET's batch sampler, epochs set by Lightning's fit loop, resume and the config errors.

Every registered method is chosen and configured by its contract (``smoke_cfg``), never by name:
a method added by docs/adding-a-method.md runs here untouched (tests/cli/test_adding_a_method.py
runs :func:`check_fast_dev_run_through_the_gpu_path` for the guide's toy)."""

import pytest

from tests._solo import skip_without_solo

pytestmark = pytest.mark.solo
skip_without_solo()

import functools  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from lightning.pytorch import Callback  # noqa: E402
from solo.data.pretrain_dataloader import prepare_datasets  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from solo_diet.cli.main import main  # noqa: E402
from solo_diet.config import ConfigError  # noqa: E402
from solo_diet.data.synthetic import write_image_folder  # noqa: E402
from solo_diet.launch.common import compose_cfg  # noqa: E402
from solo_diet.launch.datapaths import make_data_path, parse_data_settings  # noqa: E402
from solo_diet.launch.loader_settings import (  # noqa: E402
    LINEAR_PROBE_NODE,
    PRETRAIN_PROBE_NODE,
    parse_loader_settings,
)
from solo_diet.launch.pretrain import run_pretrain  # noqa: E402
from solo_diet.methods.contract import method_contract  # noqa: E402
from solo_diet.samplers import SuperBatchSampler  # noqa: E402
from tests._helpers import smoke_cfg, tiny_trainer  # noqa: E402
from tests.methods.test_sem import KWARGS  # noqa: E402

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
CLASSES, PER_CLASS, BATCH = 5, 4, 8
NUM_TRAIN = CLASSES * PER_CLASS
# solo-learn's own methods declare no contract: their tiny settings (ours come from their contract)
SOLO_LEARN_EXTRA_KWARGS = {
    "mae": {"decoder_embed_dim": 16, "decoder_depth": 1, "decoder_num_heads": 2},
}
SEM = {"num_simplices": 4, "simplex_dim": 3}
NOT_PRETRAINING = ("linear",)  # LinearModel wraps a backbone: `solo-diet linear` below


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    write_image_folder(root / "val", num_classes=CLASSES, per_class=2, seed=1)
    return root


class BatchRecorder(Callback):
    """Keeps (epoch, indexes, first view) of each training batch; checks solo-learn's structure."""

    def __init__(self, num_views: int):
        self.num_views, self.seen = num_views, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        indexes, views, targets = batch
        assert isinstance(views, list) and len(views) == self.num_views
        assert all(v.dtype == torch.float32 and v.shape[0] == indexes.shape[0] for v in views)
        assert indexes.dtype == torch.int64 and targets.shape == indexes.shape
        self.seen.append((trainer.current_epoch, indexes.clone(), views[0].clone()))


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


def gpu_cfg(method: str, data: Path, **tiny):
    """A tiny parsed cfg whose data comes through the GPU path from the ImageFolder ``data``; the
    method's contract sets its smoke settings, views and ``num_samples``."""
    kwargs = solo_learn_kwargs(method, tiny)
    cfg = smoke_cfg(method, kwargs, num_samples=NUM_TRAIN, momentum=True, batch_size=BATCH, **tiny)
    cfg.data.update(format="gpu", train_path=str(data / "train"), val_path=str(data / "val"))
    return cfg


def settings_of(cfg, probe_node: str = PRETRAIN_PROBE_NODE):
    """The loader settings and the data path of a parsed cfg, as the launcher makes them once."""
    data = parse_data_settings(cfg)
    return parse_loader_settings(cfg, data, probe_node), make_data_path(data)


def fit_through_gpu_path(cfg, **trainer_overrides):
    method_cls = METHODS[cfg.method]
    run, path = settings_of(cfg)
    hook = functools.partial(method_contract(method_cls).train_batch_sampler, cfg)
    pretrain = path.pretrain_data(run, hook)
    train, num_samples = pretrain.source, pretrain.num_samples
    assert num_samples == NUM_TRAIN  # gpu_cfg sets method_kwargs.num_samples for index methods
    model = method_cls(cfg)
    recorder = BatchRecorder(cfg.data.num_large_crops + cfg.data.num_small_crops)
    trainer = tiny_trainer(cfg, callbacks=[recorder], **trainer_overrides)
    trainer.fit(model, train, path.classification_val_loader(run, run.probe, BATCH))
    return trainer, recorder, train


def registered_methods() -> list:
    import solo_diet

    solo_diet.register()
    return sorted(name for name in METHODS if name not in NOT_PRETRAINING)


def check_fast_dev_run_through_the_gpu_path(method: str, data: Path):
    """One training and one val batch of ``method`` through the GPU path (on the CPU here), with
    the views and batch order its contract declares; returns the trained model."""
    cfg = gpu_cfg(method, data)
    trainer, recorder, train = fit_through_gpu_path(cfg)
    assert len(recorder.seen) == 1 and "val_acc1" in trainer.callback_metrics
    assert recorder.num_views == method_contract(METHODS[method]).views
    indexes = recorder.seen[0][1]
    assert indexes.unique().numel() == BATCH and 0 <= indexes.min() and indexes.max() < NUM_TRAIN
    assert torch.equal(indexes, torch.as_tensor(next(iter(train.batch_sampler))))
    return trainer.lightning_module


@pytest.mark.parametrize("method", registered_methods())
def test_every_method_runs_a_fast_dev_run_through_the_gpu_path(method, data):
    check_fast_dev_run_through_the_gpu_path(method, data)


def test_multi_crop_views_and_their_sizes(data):
    cfg = gpu_cfg("dino", data, num_small_crops=2)
    _, recorder, train = fit_through_gpu_path(cfg)
    views = train.transform(train.dataset.images[:3], torch.Generator().manual_seed(0))
    assert [tuple(v.shape) for v in views] == [(3, 3, 32, 32)] * 2 + [(3, 3, 16, 16)] * 2
    assert train.cuda_graphs is True and cfg.data.gpu.cuda_graphs is True  # the default
    assert cfg.data.gpu.decode_cache is True  # the default


def test_lightning_sets_the_epoch_and_batches_carry_true_indices(data):
    cfg = gpu_cfg("diet", data)
    _, recorder, train = fit_through_gpu_path(
        cfg, fast_dev_run=False, max_epochs=2, limit_val_batches=0
    )
    assert train.sampler.epoch == 1
    reference = SuperBatchSampler(NUM_TRAIN, BATCH, seed=cfg.seed)
    for epoch in (0, 1):
        reference.set_epoch(epoch)
        seen = [idx for e, idx, _ in recorder.seen if e == epoch]
        assert torch.equal(torch.stack(seen), reference.global_batches())


def test_a_resumed_run_draws_the_uninterrupted_runs_batches(data, tmp_path):
    cfg = gpu_cfg("simclr", data)
    _, straight, _ = fit_through_gpu_path(
        cfg, fast_dev_run=False, max_epochs=2, limit_val_batches=0
    )
    trainer, _, _ = fit_through_gpu_path(cfg, fast_dev_run=False, max_epochs=1, limit_val_batches=0)
    trainer.save_checkpoint(tmp_path / "epoch0.ckpt")
    method_cls = METHODS[cfg.method]
    run, path = settings_of(cfg)
    train = path.pretrain_data(run).source
    recorder = BatchRecorder(2)
    resumed = tiny_trainer(
        cfg, callbacks=[recorder], fast_dev_run=False, max_epochs=2, limit_val_batches=0
    )
    resumed.fit(method_cls(cfg), train, ckpt_path=str(tmp_path / "epoch0.ckpt"))
    expected = [(idx, view) for epoch, idx, view in straight.seen if epoch == 1]
    assert len(recorder.seen) == len(expected) > 0
    for (_, idx, view), (idx_ref, view_ref) in zip(recorder.seen, expected):
        assert torch.equal(idx, idx_ref) and torch.equal(view, view_ref)


def test_fraction_selects_solo_learns_samples(data):
    cfg = gpu_cfg("simclr", data)
    run, path = settings_of(cfg)
    ours = path.load_split(run, "pretrain", fraction=0.5)
    theirs = prepare_datasets(
        "custom", None, train_data_path=cfg.data.train_path, data_fraction=0.5
    )
    assert ours.targets.tolist() == [t for _, t in theirs.samples]
    reference = path.load_split(run, "pretrain")
    files = [
        p for p, _ in prepare_datasets("custom", None, train_data_path=cfg.data.train_path).samples
    ]
    rows = [files.index(p) for p, _ in theirs.samples]
    assert torch.equal(ours.images, reference.images[rows])


def test_feature_loader_is_ordered_and_complete(data):
    cfg = gpu_cfg("simclr", data)
    cfg.data.augmentations = {"crop_size": 32}
    run, path = settings_of(cfg, LINEAR_PROBE_NODE)
    _, loader = path.feature_loaders(run, batch_size=4)
    batches = list(loader)
    assert [x.shape[0] for x, _ in batches] == [4, 4, 2]
    assert torch.cat([t for _, t in batches]).tolist() == [
        c for c in range(CLASSES) for _ in range(2)
    ]


def pretrain_argv(data: Path, out: Path, config: str) -> list:
    return [
        "pretrain", "--config-path", str(SCRIPTS / "pretrain" / "custom"), "--config-name", config,
        f"data.train_path={data / 'train'}", f"data.val_path={data / 'val'}", "data.format=gpu",
        f"checkpoint.dir={out}", "auto_resume.enabled=False", "++wandb.enabled=False",
        "max_epochs=2", "accelerator=cpu", "devices=1", "precision=32",
        "++limit_train_batches=2", "++limit_val_batches=1",
        "++num_sanity_val_steps=0", "++enable_progress_bar=False", "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8", "augmentations.0.crop_size=32", "optimizer.batch_size=4",
    ]  # fmt: skip


def linear_argv(data: Path, ckpt: Path, out: Path) -> list:
    return [
        "linear", "--config-path", str(SCRIPTS / "linear" / "custom"), "--config-name", "diet",
        f"data.train_path={data / 'train'}", f"data.val_path={data / 'val'}", "data.format=gpu",
        f"pretrained_feature_extractor='{ckpt}'", "data.augmentations.crop_size=32",
        "optimizer.batch_size=4", f"checkpoint.dir={out}", "auto_resume.enabled=False",
        "wandb.enabled=False", "max_epochs=1", "accelerator=cpu", "devices=1", "precision=32",
        "++limit_train_batches=2", "++num_sanity_val_steps=0", "++enable_progress_bar=False",
    ]  # fmt: skip


def test_pretrain_then_linear_end_to_end_with_the_gpu_path(data, tmp_path, capsys):
    assert main(pretrain_argv(data, tmp_path / "pre", "diet")) == 0
    ckpts = sorted((tmp_path / "pre" / "diet").glob("*/*.ckpt"))
    args = json.loads((ckpts[-1].parent / "args.json").read_text())
    assert args["data"]["format"] == "gpu" and args["method_kwargs"]["num_samples"] == NUM_TRAIN
    assert main(linear_argv(data, ckpts[-1], tmp_path / "lin")) == 0
    assert "linear probe top-1 on the backbone representation:" in capsys.readouterr().out


class LoaderProbe(Callback):
    def on_train_end(self, trainer, pl_module):
        self.loader, self.model_sampler = trainer.train_dataloader, pl_module.super_batch_sampler


def test_sdiet_runs_through_its_super_batch_sampler(data, tmp_path):
    argv = pretrain_argv(data, tmp_path, "sdiet")[5:] + ["method_kwargs.rows_per_step=2"]
    probe = LoaderProbe()
    run_pretrain(
        compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "sdiet", argv), extra_callbacks=[probe]
    )
    sampler = probe.loader.batch_sampler
    assert isinstance(sampler, SuperBatchSampler) and sampler.rows_per_step == 2
    assert probe.model_sampler is sampler and sampler.epoch == 1


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "data.format=gpuu",
            r"`data.format` must be one of \['image_folder', 'h5', 'dali', 'gpu'\]",
        ),
        ("++dali.device=gpu", "dali"),
        ("++data.gpu.storage=vram", "data.gpu.storage"),
        ("++data.gpu.image_sise=32", r"Did you mean `data.gpu.image_size`\?"),
        ("++data.gpu.cuda_graphs=yes", r"`data.gpu.cuda_graphs` must be True or False"),
        ("++data.gpu.decode_cache=1", r"`data.gpu.decode_cache` must be True or False"),
        ("++augmentations.0.rrc.interpolation=nearest", "augmentations"),
        ("optimizer.batch_size=64", "fewer than one global batch"),
    ],
)
def test_config_errors_name_the_key(override, message, data, tmp_path):
    argv = pretrain_argv(data, tmp_path, "diet")[5:]
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet", argv + [override])
    with pytest.raises(ConfigError, match=message):
        run_pretrain(cfg)


def custom_config(own_sampler: bool) -> str:
    """A method with a config in scripts/pretrain/custom whose contract brings its own batch
    sampler (``own_sampler``) or takes solo-learn's shuffled batches."""
    from solo_diet.methods.contract import no_batch_sampler

    for name in registered_methods():
        brings = method_contract(METHODS[name]).train_batch_sampler is not no_batch_sampler
        if brings == own_sampler and (SCRIPTS / "pretrain" / "custom" / f"{name}.yaml").exists():
            return name
    raise AssertionError(f"no custom config for a method with own_sampler={own_sampler}")


@pytest.mark.parametrize("own_sampler", [False, True])
def test_solo_learns_loader_refuses_a_set_smaller_than_one_batch_in_one_line(
    own_sampler, data, tmp_path
):
    """solo-learn's loader drops the incomplete batch (no batch at all) and a method's own batch
    sampler (s-DIET's) would stop inside the fit: both are refused before training, naming the
    key."""
    method = custom_config(own_sampler)
    argv = pretrain_argv(data, tmp_path, method)[5:] + ["data.format=image_folder"]
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), method, argv + ["optimizer.batch_size=64"]
    )
    with pytest.raises(ConfigError, match=r"fewer than one global batch \(optimizer.batch_size=64"):
        run_pretrain(cfg)


DDP_SCRIPT = """
import sys
import torch
from lightning.pytorch import Callback
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.pretrain import run_pretrain

class SaveIndexes(Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.append(batch[0].cpu())

    def on_train_end(self, trainer, module):
        torch.save(torch.stack(self.seen), f"{sys.argv[1]}/rank{trainer.global_rank}.pt")

run_pretrain(compose_cfg(sys.argv[2], "diet", sys.argv[3:]), extra_callbacks=[SaveIndexes()])
"""


@pytest.mark.slow
def test_ddp_ranks_split_each_global_batch(data, tmp_path):
    """`devices=2 strategy=ddp` on the CPU: each gloo process reads its rank when it iterates; the
    two ranks' batches, rank 0 first, are the epoch's global batches."""
    import subprocess
    import sys

    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT)
    replaced = ("devices", "max_epochs")
    overrides = [o for o in pretrain_argv(data, tmp_path, "diet")[5:] if not o.startswith(replaced)]
    overrides += ["devices=2", "strategy=ddp", "++seed=3", "max_epochs=1"]
    config = str(SCRIPTS / "pretrain" / "custom")
    command = [sys.executable, str(script), str(tmp_path), config] + overrides
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    expected = SuperBatchSampler(NUM_TRAIN, 4, seed=3, num_replicas=2, rank=0).global_batches()
    assert torch.equal(torch.cat(ranks, dim=1), expected[: ranks[0].shape[0]])


def test_demo_uses_the_gpu_path_on_a_gpu_unless_told_otherwise():
    from solo_diet.cli.demo import _data_format
    from solo_diet.cli.main import build_parser

    assert _data_format("auto", "gpu") == "gpu" and _data_format("auto", "cpu") == "image_folder"
    assert _data_format("image_folder", "gpu") == "image_folder"
    assert build_parser().parse_args(["demo", "--data-format", "gpu"]).data_format == "gpu"
    with pytest.raises(ValueError, match="--data-format"):
        _data_format("gpuu", "gpu")
