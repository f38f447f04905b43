"""CUDA only: no training step of any listed method reads back from the GPU.

Every method ``solo-diet methods`` lists (but the ``linear`` probe) trains through the GPU data
path, built as ``solo-diet pretrain`` builds it (``build_model``: our same-math substitutes,
channels-last; the launcher's Trainer arguments; compare's ``EpochCostLogger``), in bf16-mixed
precision, with CUDA's sync debug mode set to "error" from the start of the second batch to the
start of the fifth: three whole steps (forward, backward, optimizer, the module's
``on_train_batch_end`` with its EMA, Lightning's bookkeeping, the callbacks and the GPU path
making the next batch). Any host synchronisation (``.item()``, ``.cpu()``, a boolean mask, a
blocking copy) raises inside the step and fails the test with its traceback.

Run on a GPU machine: ``python -m pytest tests/cli/test_no_host_sync.py -q -p no:cacheprovider``.
"""

import pytest
import torch

from tests._solo import skip_without_solo

pytestmark = [
    pytest.mark.solo,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist only on CUDA"),
]
skip_without_solo()

from lightning.pytorch import Callback, Trainer  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from solo_diet.cli.callbacks import EpochCostLogger  # noqa: E402
from solo_diet.cli.common import trainer_kwargs  # noqa: E402
from solo_diet.cli.gpu_data import pretrain_loader  # noqa: E402
from solo_diet.cli.pretrain import build_model  # noqa: E402
from solo_diet.data.synthetic import write_image_folder  # noqa: E402
from solo_diet.methods.contract import method_contract  # noqa: E402
from solo_diet.methods.testing import tiny_cfg  # noqa: E402
from tests.cli.test_gpu_path import EXTRA_KWARGS, SEM, SINGLE_VIEW, registered_methods  # noqa: E402
from tests.methods.test_sem import KWARGS  # noqa: E402

CLASSES, PER_CLASS, BATCH = 4, 16, 8  # 8 batches in the one epoch: no epoch end in the window
FIRST_GUARDED, LAST_GUARDED = 1, 3
INDEX_METHODS = ("diet", "sdiet", "diet_cf", "graph_vicreg")
# the optimizer of each method's recipe where it is not LARS (DIET paper: AdamW)
RECIPE_OPTIMIZERS = {"diet": "adamw", "sdiet": "adamw"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    return root


class ReadBackGuard(Callback):
    """CUDA's sync debug mode at "error" from the start of batch ``FIRST_GUARDED`` to the start of
    batch ``LAST_GUARDED + 1``; records the guarded batches."""

    def __init__(self):
        self.guarded: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == FIRST_GUARDED:
            torch.cuda.synchronize()  # the unguarded first steps' work is done
            torch.cuda.set_sync_debug_mode("error")
        if batch_idx == LAST_GUARDED + 1:
            torch.cuda.set_sync_debug_mode("default")
        if FIRST_GUARDED <= batch_idx <= LAST_GUARDED:
            self.guarded.append(batch_idx)

    def on_train_end(self, trainer, pl_module):
        torch.cuda.set_sync_debug_mode("default")


def cuda_cfg(method: str, data, optimizer: str):
    """A tiny parsed cfg: the GPU path over ``data``, bf16-mixed on one GPU, ``optimizer``."""
    base = method.removesuffix("_sem")
    kwargs = {**KWARGS.get(base, {}), **EXTRA_KWARGS.get(base, {})}
    if base in INDEX_METHODS:
        kwargs["num_samples"] = CLASSES * PER_CLASS
    if method.endswith("_sem"):
        kwargs["sem"] = dict(SEM)
    tiny = {"num_large_crops": 1 if base in SINGLE_VIEW else 2}
    if base == "mae":
        tiny.update(backbone="vit_tiny", backbone_kwargs={"img_size": 32, "patch_size": 16})
    cfg = tiny_cfg(method, kwargs, momentum=True, batch_size=BATCH, optimizer=optimizer, **tiny)
    if optimizer == "lars":
        cfg.optimizer.kwargs = {"momentum": 0.9, "eta": 0.02, "clip_lr": True}
    cfg.data.update(format="gpu", train_path=str(data / "train"), val_path=None)
    cfg.update(
        accelerator="gpu",
        devices=[0],  # as the launcher normalises `devices`
        precision="bf16-mixed",
        max_epochs=1,
        limit_train_batches=LAST_GUARDED + 2,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_model_summary=False,
    )
    return cfg


def cases() -> list:
    methods = registered_methods()
    return [(m, "lars") for m in methods] + sorted(RECIPE_OPTIMIZERS.items())


@pytest.mark.parametrize("method, optimizer", cases())
def test_steps_past_the_first_never_read_back(method, optimizer, data, tmp_path):
    cfg = cuda_cfg(method, data, optimizer)
    method_cls = METHODS[method]
    train, _ = pretrain_loader(cfg, method_contract(method_cls).train_batch_sampler)
    model = build_model(cfg, method_cls)
    guard = ReadBackGuard()
    costs = EpochCostLogger(tmp_path / "epochs.csv")
    trainer = Trainer(**trainer_kwargs(cfg, [costs, guard], logger=None))
    try:
        trainer.fit(model, train)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert guard.guarded == list(range(FIRST_GUARDED, LAST_GUARDED + 1))
    if optimizer == "lars":
        assert type(trainer.optimizers[0]).__name__ == "ForeachLARS"
