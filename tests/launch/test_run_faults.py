"""A run that diverges fails (:class:`DivergenceGuard`, its hooks called as Lightning calls them),
and the run folders a run killed before its first checkpoint left are removed, those of live runs
and those holding checkpoints kept."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.core.lock import folder_lock
from solo_diet.launch.callbacks import Diverged, DivergenceGuard, non_finite_tensors
from solo_diet.launch.checkpointing import RUN_LOCK_FILE, remove_abandoned_runs

pytestmark = pytest.mark.solo


def fake_trainer(log_every: int = 50) -> SimpleNamespace:
    strategy = SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision)
    return SimpleNamespace(
        global_step=0,
        current_epoch=3,
        log_every_n_steps=log_every,
        sanity_checking=False,
        strategy=strategy,
        callback_metrics={},
    )


def train(guard: DivergenceGuard, trainer, module, losses, first_batch: int = 0) -> None:
    """One batch per loss, as Lightning calls the hooks (the step counted after each batch)."""
    for batch_idx, loss in enumerate(losses, start=first_batch):
        guard.on_train_batch_start(trainer, module, None, batch_idx)
        guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(loss)}, None, batch_idx)
        trainer.global_step += 1


def nan_weights() -> torch.nn.Linear:
    module = torch.nn.Linear(2, 2)
    with torch.no_grad():
        module.bias[0] = math.nan
    return module


def test_a_non_finite_loss_with_non_finite_weights_stops_naming_its_first_step_and_the_key():
    guard, trainer, module = DivergenceGuard(), fake_trainer(), torch.nn.Linear(2, 2)
    train(guard, trainer, module, [1.0, 2.0])
    guard.on_train_epoch_end(trainer, module)  # finite so far
    module = nan_weights()
    train(guard, trainer, module, [3.0, math.nan, 1.0, math.inf])
    with pytest.raises(Diverged) as stopped:
        guard.on_train_epoch_end(trainer, module)
    assert str(stopped.value) == (
        "the training diverged: the weights `bias` became NaN or infinite at step 3 of epoch 3; "
        "the likely cause is too large a learning rate: lower `optimizer.lr`. No checkpoint holds "
        "these weights."
    )


def test_a_non_finite_loss_with_finite_weights_is_not_divergence():
    """solo-learn's DeepClusterV2 ignores every target in its first epoch: its loss is a mean
    over none (NaN), its gradients 0."""
    guard, trainer, module = DivergenceGuard(), fake_trainer(log_every=2), torch.nn.Linear(2, 2)
    train(guard, trainer, module, [math.nan, math.nan, math.nan])
    guard.on_validation_start(trainer, module)
    guard.on_train_epoch_end(trainer, module)


def test_the_loss_is_read_every_log_every_n_steps_and_around_validation():
    guard, trainer, module = DivergenceGuard(), fake_trainer(log_every=4), nan_weights()
    train(guard, trainer, module, [1.0, 1.0, 1.0, 1.0, math.inf, 1.0, 1.0])  # 4 read: finite
    with pytest.raises(Diverged, match="at step 4 of"):
        train(guard, trainer, module, [1.0], first_batch=7)  # the 8th batch reads 4 to 7
    guard = DivergenceGuard()
    train(guard, trainer, module, [-math.inf])
    trainer.sanity_checking = True
    guard.on_validation_start(trainer, module)  # the sanity check trains nothing: not read
    trainer.sanity_checking = False
    with pytest.raises(Diverged, match="weights `bias` became NaN or infinite"):
        guard.on_validation_start(trainer, module)
    module = torch.nn.Linear(2, 2)
    trainer.callback_metrics["val_loss"] = torch.tensor(2.0)
    guard.on_validation_end(trainer, module)
    trainer.callback_metrics["val_loss"] = torch.tensor(math.nan)  # weights past float32's range
    with pytest.raises(Diverged, match="the validation loss became NaN or infinite by step 8 of"):
        guard.on_validation_end(trainer, module)


def test_non_finite_weights_stop_the_epoch_naming_the_tensor():
    guard, trainer = DivergenceGuard(), fake_trainer()
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    guard.on_train_epoch_end(trainer, module)  # no loss seen, finite weights
    with torch.no_grad():
        module[0].bias[1] = math.nan
    module[1].running_var[0] = math.inf
    with pytest.raises(Diverged, match=r"the weights `0.bias` \(and 1 more\) became NaN or infin"):
        guard.on_train_epoch_end(trainer, module)
    named = [("a", torch.ones(3)), ("n", torch.tensor([1, 2])), ("b", torch.tensor([math.nan]))]
    assert non_finite_tensors(named) == ["b"] and non_finite_tensors([]) == []


def test_a_later_run_removes_what_a_run_killed_before_its_first_checkpoint_left(tmp_path):
    def run_folder(name: str, *files: str):
        folder = tmp_path / name
        folder.mkdir()
        for file in files:
            (folder / file).write_text(json.dumps({"pid": 1, "host": "h"}))
        return folder

    killed = run_folder("offline-a", "args.json")
    killed_later = run_folder("offline-b", "args.json", RUN_LOCK_FILE)  # its lock: not held
    alive = run_folder("offline-c", "args.json")
    resumable = run_folder("offline-d", "args.json", "x-ep=0.ckpt")
    starting = run_folder("offline-e")  # a run between making its folder and writing args.json
    other = run_folder("offline-f", "args.json", "notes.txt")
    lock_only = run_folder("offline-g", RUN_LOCK_FILE)  # a full disk at the lock's first write
    said = []
    with folder_lock(alive / RUN_LOCK_FILE, "pretrain", "", ""):
        remove_abandoned_runs(tmp_path, say=said.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        alive.name,
        resumable.name,
        starting.name,
        other.name,
    ]
    assert said == [
        f"removed {folder}: a run stopped before its first checkpoint left it"
        for folder in (killed, killed_later, lock_only)
    ]
