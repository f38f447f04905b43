"""``data.format: gpu`` through solo-learn and Lightning: every registered method, the launchers,
s-DIET's batch sampler, epochs set by Lightning's fit loop, resume and the config errors.

Every registered method is chosen and configured by its contract (``smoke_cfg``), never by name:
a method added by docs/adding-a-method.md runs here untouched (tests/cli/test_adding_a_method.py
runs :func:`check_fast_dev_run_through_the_gpu_path` for the guide's toy)."""

import pytest

from tests._helpers import NEEDS_SOLO, SCRIPTS

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import json

import torch
from solo.data.pretrain_dataloader import prepare_datasets
from solo.methods import METHODS

from solo_diet.cli.main import main
from solo_diet.core.errors import ConfigError
from solo_diet.core.sdiet.samplers import SuperBatchSampler
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.pretrain import run_pretrain
from solo_diet.launch.settings import (
    LINEAR_PROBE_NODE,
)
from solo_diet.methods.contract import method_contract
from tests._helpers.gpu_path import (
    BATCH,
    CLASSES,
    DDP_SCRIPT,
    NUM_TRAIN,
    BatchRecorder,
    LoaderProbe,
    check_fast_dev_run_through_the_gpu_path,
    fit_through_gpu_path,
    gpu_cfg,
    linear_argv,
    pretrain_argv,
    settings_of,
    write_images,
)
from tests._helpers.methods import (
    fits_of,
    registered_methods,
)
from tests._helpers.tiny import tiny_trainer

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("method", fits_of(registered_methods()))
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


def test_pretrain_then_linear_end_to_end_with_the_gpu_path(data, tmp_path, capsys):
    assert main(pretrain_argv(data, tmp_path / "pre", "diet")) == 0
    ckpts = sorted((tmp_path / "pre" / "diet").glob("*/*.ckpt"))
    args = json.loads((ckpts[-1].parent / "args.json").read_text())
    assert args["data"]["format"] == "gpu" and args["method_kwargs"]["num_samples"] == NUM_TRAIN
    assert main(linear_argv(data, ckpts[-1], tmp_path / "lin")) == 0
    assert "linear probe top-1 on the backbone representation:" in capsys.readouterr().out


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


def test_demo_uses_the_tensor_data_path_unless_told_otherwise():
    """On a GPU and on the CPU alike (3x faster than solo-learn's loader on 2 CPU cores)."""
    from solo_diet.cli.demo import demo_data_format
    from solo_diet.cli.main import build_parser

    assert demo_data_format("auto") == "gpu" and demo_data_format("image_folder") == "image_folder"
    assert build_parser().parse_args(["demo", "--data-format", "gpu"]).data_format == "gpu"
    with pytest.raises(ValueError, match="--data-format"):
        demo_data_format("gpuu")
