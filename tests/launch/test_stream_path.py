"""``data.gpu.storage: stream`` through solo-learn and Lightning: every registered method on a JPEG
folder of several sizes, `solo-diet pretrain` then `linear`, s-DIET's batch sampler, corrupt files
and the keys' errors."""

import pytest

from tests._helpers import NEEDS_SOLO, SCRIPTS

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import multiprocessing
import re
from pathlib import Path

import torch
from lightning.pytorch import Callback
from solo.methods import METHODS

from solo_diet.cli.main import main
from solo_diet.core.data.stream import CorruptImage, EncodedFiles, StreamLoader
from solo_diet.core.errors import ConfigError
from solo_diet.core.sdiet.samplers import SuperBatchSampler
from solo_diet.launch.common import compose_cfg, fit_or_raise
from solo_diet.launch.pretrain import run_pretrain
from tests._helpers.gpu_path import (
    BATCH,
    CLASSES,
    DDP_SCRIPT,
    NUM_TRAIN,
    PER_CLASS,
    LoaderProbe,
    fit_through_gpu_path,
    gpu_cfg,
    linear_argv,
    pretrain_argv,
    settings_of,
)
from tests._helpers.methods import fits_of, registered_methods
from tests._helpers.synthetic import write_jpeg_folder
from tests._helpers.tiny import tiny_trainer

pytestmark = pytest.mark.solo

SIZES = ((40, 56), (48, 32), (64, 64), (36, 44))
STREAM = ["++data.gpu.storage=stream", "data.num_workers=0"]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    write_jpeg_folder(root / "train", CLASSES, PER_CLASS, sizes=SIZES, seed=0)
    write_jpeg_folder(root / "val", CLASSES, 2, sizes=SIZES[::-1], seed=1)
    return root


def stream_cfg(method: str, data: Path, **tiny):
    cfg = gpu_cfg(method, data, **tiny)
    cfg.data.gpu = {"storage": "stream"}
    return cfg


def check_fast_dev_run_through_the_stream(cfg) -> torch.device:
    """One training and one val batch through the stream, with true indices in the sampler's
    order; returns the device the views were made on."""
    trainer, recorder, train = fit_through_gpu_path(cfg)
    assert isinstance(train, StreamLoader) and isinstance(train.dataset, EncodedFiles)
    assert len(recorder.seen) == 1 and "val_acc1" in trainer.callback_metrics
    indexes = recorder.seen[0][1].cpu()
    assert indexes.unique().numel() == BATCH and 0 <= indexes.min() and indexes.max() < NUM_TRAIN
    assert torch.equal(indexes, torch.as_tensor(next(iter(train.batch_sampler))))
    return recorder.seen[0][2].device


@pytest.mark.parametrize("method", fits_of(registered_methods()))
def test_every_method_runs_a_fast_dev_run_through_the_stream(method, jpegs):
    check_fast_dev_run_through_the_stream(stream_cfg(method, jpegs))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", registered_methods())
def test_every_method_trains_through_the_stream_on_a_gpu(method, jpegs):
    """The same fast_dev_run on one GPU in bf16-mixed: nvJPEG decodes each batch there."""
    cfg = stream_cfg(method, jpegs)
    cfg.update(accelerator="gpu", devices=[0], precision="bf16-mixed")
    assert check_fast_dev_run_through_the_stream(cfg).type == "cuda"


def test_each_epoch_streams_its_own_order_through_persistent_workers(jpegs):
    cfg = stream_cfg("diet", jpegs)
    cfg.data.num_workers = 1
    _, recorder, train = fit_through_gpu_path(
        cfg, fast_dev_run=False, max_epochs=2, limit_val_batches=0
    )
    assert train.sampler.epoch == 1 and train.num_workers == 1
    by_epoch = {e: torch.stack([i for s, i, _ in recorder.seen if s == e]) for e in (0, 1)}
    for epoch, seen in by_epoch.items():
        train.set_epoch(epoch)
        assert seen.tolist() == list(train.batch_sampler)
    assert not torch.equal(by_epoch[0], by_epoch[1])


class LoaderWorkers(Callback):
    """The loader worker processes alive at any training or validation batch."""

    def __init__(self) -> None:
        self.seen: set = set()

    def on_train_batch_end(self, *args) -> None:
        self.seen |= set(multiprocessing.active_children())

    on_validation_batch_end = on_train_batch_end


def test_the_fit_stops_the_stream_workers_when_it_ends(jpegs):
    """Persistent host workers left to the interpreter's exit would hold it about 5 s each on
    CUDA: the launcher's fit stops those of the train and val loaders while both are still in
    use here, after an epoch cut short (two of its batches) as a run stopped early leaves it."""
    cfg = stream_cfg("diet", jpegs)
    cfg.data.num_workers = 2
    run, path = settings_of(cfg)
    assert type(path).__name__ == "StreamPath"  # data.gpu.storage: stream chooses it
    train = path.pretrain_data(run).source
    val = path.classification_val_loader(run, BATCH)
    workers = LoaderWorkers()
    before = set(multiprocessing.active_children())  # an earlier test's, if any outlived it
    trainer = tiny_trainer(
        cfg, [workers], fast_dev_run=False, max_epochs=1, limit_train_batches=2,
        limit_val_batches=1, num_sanity_val_steps=0,
    )  # fmt: skip
    fit_or_raise(
        trainer,
        METHODS["diet"](cfg),
        cfg,
        None,
        path,
        train_dataloaders=train,
        val_dataloaders=val,
    )
    ours = workers.seen - before
    assert len(ours) == 4  # two persistent workers per loader
    assert not any(worker.is_alive() for worker in ours)
    assert len(list(train)) == len(train)  # a new epoch starts new workers


def test_pretrain_then_linear_end_to_end_with_the_stream(jpegs, tmp_path, capsys):
    argv = pretrain_argv(jpegs, tmp_path / "pre", "diet") + STREAM
    assert main(argv) == 0
    ckpt = sorted((tmp_path / "pre" / "diet").glob("*/*.ckpt"))[-1]
    assert main(linear_argv(jpegs, ckpt, tmp_path / "lin") + STREAM) == 0
    assert "linear probe top-1 on the backbone representation:" in capsys.readouterr().out


def test_sdiet_runs_through_its_super_batch_sampler(jpegs, tmp_path):
    argv = pretrain_argv(jpegs, tmp_path, "sdiet")[5:] + STREAM + ["method_kwargs.rows_per_step=2"]
    probe = LoaderProbe()
    run_pretrain(
        compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "sdiet", argv), extra_callbacks=[probe]
    )
    assert isinstance(probe.loader, StreamLoader)
    sampler = probe.loader.batch_sampler
    assert isinstance(sampler, SuperBatchSampler) and sampler.rows_per_step == 2
    assert probe.model_sampler is sampler and sampler.epoch == 1


def test_a_corrupt_file_stops_pretrain_naming_it_or_is_skipped(jpegs, tmp_path, capsys):
    broken = tmp_path / "broken"
    for path in sorted((jpegs / "train").rglob("*.jpg")):
        target = broken / path.relative_to(jpegs / "train")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    good = {path: path.read_bytes() for path in sorted(broken.rglob("*.jpg"))}
    for path in good:
        path.write_bytes(b"\xff\xd8\xff" + b"\x00" * 64)  # a JPEG's start, nothing more
    argv = pretrain_argv(jpegs, tmp_path / "out", "diet")[5:] + STREAM
    argv = [a for a in argv if not a.startswith(("data.train_path", "max_epochs"))]
    argv += [f"data.train_path={broken}", "max_epochs=1", "++limit_train_batches=1.0"]
    command = ["pretrain", "--config-path", str(SCRIPTS / "pretrain" / "custom")]
    assert main(command + ["--config-name", "diet"] + argv) == 2  # a user error: one line
    assert re.search(
        r"solo-diet pretrain: cannot decode .*class_000.*\.jpg", capsys.readouterr().err
    )
    with pytest.raises(CorruptImage, match="data.gpu.on_corrupt: skip"):
        run_pretrain(compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet", argv))
    corrupt = list(good)[3:5]
    for path, data in good.items():
        path.write_bytes(b"" if path in corrupt else data)
    skip = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", argv + ["++data.gpu.on_corrupt=skip"]
    )
    run_pretrain(skip)  # every file is in one of the epoch's 5 batches
    err = capsys.readouterr().err
    assert all(f"skipping the corrupt image {path} (the file is empty)" in err for path in corrupt)


@pytest.mark.slow
def test_ddp_ranks_stream_their_share_of_each_global_batch(jpegs, tmp_path):
    """Two gloo processes, one worker each: rank 0's and rank 1's batches side by side are the
    epoch's global batches."""
    import subprocess
    import sys

    (tmp_path / "ddp_run.py").write_text(DDP_SCRIPT)
    argv = pretrain_argv(jpegs, tmp_path, "diet")[5:] + STREAM[:1] + ["data.num_workers=1"]
    argv = [a for a in argv if not a.startswith(("devices", "max_epochs"))]
    argv += ["devices=2", "strategy=ddp", "++seed=3", "max_epochs=1"]
    config = str(SCRIPTS / "pretrain" / "custom")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "ddp_run.py"), str(tmp_path), config, *argv],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = torch.cat([torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)], dim=1)
    expected = SuperBatchSampler(NUM_TRAIN, 4, seed=3, num_replicas=2, rank=0).global_batches()
    assert torch.equal(ranks, expected[: ranks.shape[0]])


@pytest.mark.parametrize(
    "override, message",
    [
        ("++data.gpu.on_corrupt=ignore", r"`data.gpu.on_corrupt` must be one of"),
        ("++data.gpu.storage=streaming", "data.gpu.storage"),
        ("data.dataset=cifar10", "cifar10` is not an image folder"),
    ],
)
def test_config_errors_name_the_key(override, message, jpegs, tmp_path):
    argv = pretrain_argv(jpegs, tmp_path, "diet")[5:] + STREAM + [override]
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet", argv)
    with pytest.raises(ConfigError, match=message):
        run_pretrain(cfg)


def test_compare_evaluation_reads_the_stream(jpegs):
    """compare's feature loaders and LiDAR's views through the stream: every val image once, with
    its target, and the views of the chosen images (of different sizes) at the crop size."""
    from omegaconf import OmegaConf

    from solo_diet.launch.datapaths import make_data_path, parse_data_settings
    from solo_diet.launch.datapaths.base import ViewRequest
    from solo_diet.launch.settings import parse_loader_settings

    data = {"dataset": "custom", "train_path": str(jpegs / "train"), "val_path": str(jpegs / "val")}
    data.update(num_workers=0, augmentations={"crop_size": 32}, format="gpu")
    cfg = OmegaConf.create({"accelerator": "cpu", "seed": 0, "data": data})
    cfg.data.gpu = {"storage": "stream"}
    path = make_data_path(parse_data_settings(cfg))
    run = parse_loader_settings(cfg, path.settings)
    _, val = path.feature_loaders(run, batch_size=4)
    targets = torch.cat([y for _, y in val])
    assert sorted(targets.tolist()) == sorted(list(range(CLASSES)) * 2)
    request = ViewRequest(None, lambda n: torch.arange(n)[:3], 2, 4, 0, torch.device("cpu"))
    assert tuple(path.lidar_views(run, request).shape) == (6, 3, 32, 32)
