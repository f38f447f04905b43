"""The read-back guard of tests/launch/test_no_host_sync.py: the recorder of operations that read
back from a GPU, the guarded window of a fit, the cfg and the cases."""

from __future__ import annotations

import functools
import traceback

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from solo.methods import METHODS
from torch.utils._python_dispatch import TorchDispatchMode

from solo_diet.launch.callbacks import DivergenceGuard, EpochCostLogger
from solo_diet.launch.common import trainer_kwargs
from solo_diet.launch.pretrain import build_model
from solo_diet.launch.settings import parse_performance_settings
from solo_diet.methods.contract import method_contract
from tests._helpers.gpu_path import (
    settings_of,
)
from tests._helpers.methods import registered_methods, solo_learn_kwargs
from tests._helpers.tiny import smoke_cfg

CLASSES, PER_CLASS, BATCH = 4, 16, 8  # 8 batches in the one epoch: no epoch end in the window

FIRST_GUARDED, LAST_GUARDED = 1, 3

# the optimizer of each method's recipe where it is not LARS (DIET paper: AdamW)
RECIPE_OPTIMIZERS = {"diet": "adamw", "sdiet": "adamw"}

HOST_SIDE = {"sdiet": "its row store reads the sampler's host indices, host tensors on a GPU too"}

_ATEN = torch.ops.aten

_READ_BACK_OPS = {
    _ATEN._local_scalar_dense.default: "a tensor read as a Python number",
    _ATEN.nonzero.default: "nonzero",
    _ATEN.masked_select.default: "masked_select",
    _ATEN.lift_fresh.default: "a tensor made from host data (a blocking copy on a GPU)",
    _ATEN._unique2.default: "unique",
    _ATEN.unique_dim.default: "unique",
    _ATEN.unique_consecutive.default: "unique",
}

_INDEXING = (_ATEN.index.Tensor, _ATEN.index_put.default, _ATEN.index_put_.default)


class ReadBackRecorder(TorchDispatchMode):
    """Records each operation that would read back from a GPU, with the line that called it.

    A Python number written into a slice (``mask[:, :k] = 0``) lifts a 0-dim host tensor that
    ``fill_`` takes as its value: a fill kernel on a GPU, no copy. Such a lifted tensor is held
    back until its first use, and recorded only if that use is not as ``fill_``'s value."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []
        self.lifted_scalar: tuple[torch.Tensor, str] | None = None

    def _check_lifted_scalar(self, func, args) -> None:
        if self.lifted_scalar is None:
            return
        scalar, where = self.lifted_scalar
        uses = [i for i, a in enumerate(args) if a is scalar]
        if uses:
            self.lifted_scalar = None
            if not (func is _ATEN.fill_.Tensor and uses == [1]):
                self.seen.append(where)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._check_lifted_scalar(func, args)
        what = _READ_BACK_OPS.get(func)
        if func in _INDEXING and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]
        ):
            what = "boolean-mask indexing"
        result = func(*args, **(kwargs or {}))
        if what is not None:
            frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename]
            where = f"{what} at {frames[-1].filename}:{frames[-1].lineno}"
            if func is _ATEN.lift_fresh.default and result.dim() == 0:
                self.lifted_scalar = (result, where)
            else:
                self.seen.append(where)
        return result


class ReadBackGuard(Callback):
    """From the start of batch ``FIRST_GUARDED`` to the start of batch ``LAST_GUARDED + 1``: CUDA's
    sync debug mode at "error" on a GPU, a :class:`ReadBackRecorder` on the CPU; records the
    guarded batches."""

    def __init__(self, cuda: bool):
        self.cuda, self.guarded, self.active = cuda, [], False
        self.recorder = None if cuda else ReadBackRecorder()

    def _on(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()  # the unguarded first steps' work is done
            torch.cuda.set_sync_debug_mode("error")
        else:
            self.recorder.__enter__()
        self.active = True

    def off(self) -> None:
        if not self.active:
            return
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
        else:
            self.recorder.__exit__(None, None, None)
        self.active = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == FIRST_GUARDED:
            self._on()
        if batch_idx == LAST_GUARDED + 1:
            self.off()
        if FIRST_GUARDED <= batch_idx <= LAST_GUARDED:
            self.guarded.append(batch_idx)

    def on_train_end(self, trainer, pl_module):
        self.off()


def cuda_cfg(method: str, data, optimizer: str):
    """A tiny parsed cfg: the GPU path over ``data``, bf16-mixed on one GPU, ``optimizer``; the
    method's contract sets its smoke settings, views and ``num_samples``."""
    tiny: dict = {}
    kwargs = solo_learn_kwargs(method, tiny)
    cfg = smoke_cfg(
        method,
        kwargs,
        num_samples=CLASSES * PER_CLASS,
        momentum=True,
        batch_size=BATCH,
        optimizer=optimizer,
        **tiny,
    )
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


def fit_guarded(method: str, optimizer: str, data, tmp_path, cuda: bool) -> ReadBackGuard:
    cfg = cuda_cfg(method, data, optimizer)
    if not cuda:
        cfg.update(accelerator="cpu", precision="bf16-mixed")
    method_cls = METHODS[method]
    run, path = settings_of(cfg)
    hook = functools.partial(method_contract(method_cls).train_batch_sampler, cfg)
    train = path.pretrain_data(run, hook).source
    model = build_model(cfg, method_cls, parse_performance_settings(cfg))
    guard = ReadBackGuard(cuda)
    costs = EpochCostLogger(tmp_path / "epochs.csv")
    callbacks = [DivergenceGuard(), costs, guard]  # the launchers' divergence guard too
    trainer = Trainer(**trainer_kwargs(cfg, callbacks, logger=None))
    try:
        trainer.fit(model, train)
    finally:
        guard.off()
    assert guard.guarded == list(range(FIRST_GUARDED, LAST_GUARDED + 1))
    if optimizer == "lars":
        assert type(trainer.optimizers[0]).__name__ == "ForeachLARS"
    return guard


def check_cpu_stand_in_sees_no_read_back(method: str, optimizer: str, data, tmp_path):
    """The guarded window of ``method`` on the CPU records no read-back (skips the known ones)."""
    base = method.removesuffix("_sem")
    known = HOST_SIDE.get(base)
    if known is not None or optimizer != "lars":  # AdamW's step counts are host tensors
        pytest.skip(known or "torch's AdamW reads its host-side step counts")
    guard = fit_guarded(method, optimizer, data, tmp_path, cuda=False)
    assert guard.recorder.seen == []
