"""``performance.capture_backbone``: the key's checks, the refusal of backbones that draw random
numbers, the eager path (CPU, no grad, evaluation), copies and pickles; on the CPU with graphs
stood in by eager calls, the choice of graph per view and BatchNorm's statistics after the
capture; on a CUDA device, runs through Lightning that end on the same weights captured and eager
(one and two views, float32 and bf16-mixed)."""

from __future__ import annotations

import copy
import pickle

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from lightning.pytorch import seed_everything
from omegaconf import OmegaConf
from solo.methods import METHODS
from torch import nn

import solo_diet
from solo_diet.config import ConfigError
from solo_diet.methods.captured_backbone import (
    CAPTURE_KEY,
    MAX_GRAPHS,
    CapturedForward,
    capture_backbone,
    fill_and_check_capture,
)
from solo_diet.methods.testing import fake_pretrain_loader, tiny_cfg, tiny_trainer
from tests._helpers.methods import KWARGS

pytestmark = pytest.mark.solo

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
METHOD_KWARGS = {"diet": {"num_samples": 24}, "simclr": KWARGS["simclr"], "byol": KWARGS["byol"]}


def run_cfg(
    method: str = "diet", *, capture=True, crops: int = 1, backbone="cp_resnet8", **trainer
):
    kwargs = METHOD_KWARGS[method]
    cfg = tiny_cfg(method, kwargs, num_large_crops=crops, momentum=True, backbone=backbone)
    cfg.accelerator, cfg.devices = "gpu", [0]
    cfg.performance = {"capture_backbone": capture}
    for key, value in trainer.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def test_the_key_defaults_to_off_and_takes_only_a_bool():
    cfg = tiny_cfg("diet", METHOD_KWARGS["diet"], num_large_crops=1)
    assert fill_and_check_capture(cfg) is False and cfg.performance.capture_backbone is False
    cfg.performance.capture_backbone = "yes"
    with pytest.raises(ConfigError, match=f"`{CAPTURE_KEY}` must be True or False"):
        fill_and_check_capture(cfg)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"accelerator": "cpu"}, "needs a CUDA device, got `accelerator: cpu`: set accelerator"),
        ({"devices": [0, 1]}, "runs on one device of one node, got devices=\\[0, 1\\]"),
        ({"num_nodes": 2}, "runs on one device of one node, got devices=\\[0\\] and num_nodes=2"),
        ({"accumulate_grad_batches": 2}, "one backward per optimizer step .* got accumulate_grad"),
    ],
)
def test_it_refuses_a_cpu_run_more_than_one_device_and_gradient_accumulation(setting, message):
    cfg = run_cfg(**setting)
    with pytest.raises(ConfigError, match=message):
        fill_and_check_capture(cfg)


def test_a_backbone_that_draws_random_numbers_is_refused_by_name():
    solo_diet.register()
    cfg = run_cfg()
    model = METHODS["diet"](cfg)
    model.backbone.stem.append(nn.Dropout(0.1))
    with pytest.raises(ConfigError, match=r"draws random numbers in training \(stem.4 \(Dropout"):
        capture_backbone(cfg, model)
    model.backbone.stem[4].p = 0.0
    assert capture_backbone(cfg, model) == [
        f"backbone ResNet8: forward and backward replayed as CUDA graphs (`{CAPTURE_KEY}=False` "
        "runs it eagerly)"
    ]


def test_off_changes_nothing_and_on_keeps_parameters_and_state_dict():
    solo_diet.register()
    seed_everything(0)
    model = METHODS["diet"](run_cfg())
    keys = list(model.state_dict())
    assert capture_backbone(run_cfg(capture=False), model) == []
    assert "forward" not in vars(model.backbone)
    capture_backbone(run_cfg(), model)
    assert isinstance(vars(model.backbone)["forward"], CapturedForward)
    assert list(model.state_dict()) == keys


def test_every_call_that_is_not_a_cuda_training_call_runs_the_backbone_eagerly():
    solo_diet.register()
    seed_everything(0)
    model = METHODS["diet"](run_cfg())
    x = torch.randn(4, 3, 32, 32)
    expected = type(model.backbone).forward(model.backbone, x)
    capture_backbone(run_cfg(), model)
    assert torch.equal(model.backbone(x), expected)  # a CPU tensor
    with torch.no_grad():
        assert torch.equal(model.backbone(x), expected)
    assert vars(model.backbone)["forward"].graphs == []


def test_a_copy_or_a_pickle_starts_without_graphs_bound_to_its_own_backbone():
    solo_diet.register()
    model = METHODS["diet"](run_cfg())
    capture_backbone(run_cfg(), model)
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        forward = vars(copied.backbone)["forward"]
        assert isinstance(forward, CapturedForward)
        assert forward.owner is copied.backbone and forward.graphs == []


def trained(method: str, crops: int, precision: str, capture: bool):
    seed_everything(0)
    cfg = run_cfg(method, capture=capture, crops=crops, precision=precision)
    cfg.optimizer.batch_size = 4
    model = METHODS[method](cfg)
    capture_backbone(cfg, model)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = tiny_trainer(
        cfg, fast_dev_run=False, max_epochs=1, limit_val_batches=0, benchmark=False
    )
    trainer.fit(model, fake_pretrain_loader(cfg, num_samples=24, shuffle=False))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return state, {k: v.cpu() for k, v in initial.items()}, vars(model.backbone).get("forward")


@needs_cuda
@pytest.mark.parametrize(
    "method, crops, precision",
    [("diet", 1, "32"), ("diet", 1, "bf16-mixed"), ("simclr", 2, "32"), ("byol", 2, "bf16-mixed")],
)
def test_training_ends_on_the_same_weights_captured_and_eager(method, crops, precision):
    """6 steps through Lightning: every floating-point tensor of the model (BatchNorm's running
    statistics included) within 1e-4 of what the step moved it, with one graph replayed per view."""
    solo_diet.register()
    captured, initial, forward = trained(method, crops, precision, capture=True)
    eager, _, _ = trained(method, crops, precision, capture=False)
    assert len(forward.graphs) == crops
    assert all(graph.replays == 6 for graph in forward.graphs)
    for name, value in eager.items():
        if not value.is_floating_point():
            assert torch.equal(captured[name], value), name
            continue
        moved = (value.double() - initial[name].double()).abs().max().item()
        gap = (captured[name].double() - value.double()).abs().max().item()
        assert gap <= 1e-4 * max(moved, 1e-6), (name, gap, moved)


def eager_graphs(monkeypatch) -> list[int]:
    """On the CPU, "graphs" that run their module eagerly after the three warm-up passes that
    ``make_graphed_callables`` makes (which move BatchNorm's statistics); returns the list of the
    captures' batch sizes."""
    captures = []

    def make_graphed_callables(module, sample_args, **kwargs):
        captures.append(sample_args[0].shape[0])
        for _ in range(3):
            module(*sample_args)
        return module

    def replayable(self, x) -> bool:
        return isinstance(x, torch.Tensor) and torch.is_grad_enabled() and self.owner.training

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", make_graphed_callables)
    monkeypatch.setattr(CapturedForward, "_replayable", replayable)
    return captures


def test_each_view_of_a_step_gets_its_own_graph_free_again_after_the_backward(monkeypatch):
    """Two views: two captures in the first step, replays in the next, each graph busy until the
    backward; a new shape gets graphs of its own up to ``MAX_GRAPHS``, then calls run eagerly."""
    captures = eager_graphs(monkeypatch)
    solo_diet.register()
    model = METHODS["diet"](run_cfg())
    capture_backbone(run_cfg(), model)
    backbone, forward = model.backbone, vars(model.backbone)["forward"]
    views = [torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)]
    for _ in range(2):
        outs = [backbone(view) for view in views]
        assert captures == [4, 4] and all(graph.busy for graph in forward.graphs)
        sum(out.sum() for out in outs).backward()
        assert not any(graph.busy for graph in forward.graphs)
    assert [graph.replays for graph in forward.graphs] == [2, 2]
    outs = [backbone(torch.randn(2, 3, 32, 32)) for _ in range(3)]
    assert captures == [4, 4, 2, 2] and len(forward.graphs) == MAX_GRAPHS
    assert [graph.replays for graph in forward.graphs] == [2, 2, 1, 1]  # the third call: eager
    assert all(out.requires_grad for out in outs)


def test_the_capture_leaves_batchnorm_statistics_where_eager_steps_leave_them(monkeypatch):
    """The capture's warm-up passes are undone: after three steps the running statistics equal an
    eager backbone's that saw the same batches."""
    captures = eager_graphs(monkeypatch)
    solo_diet.register()
    seed_everything(0)
    model = METHODS["diet"](run_cfg(backbone="resnet18"))  # ResNet-8 has no BatchNorm
    reference = copy.deepcopy(model.backbone)
    capture_backbone(run_cfg(backbone="resnet18"), model)
    for _ in range(3):
        batch = torch.randn(4, 3, 32, 32)
        model.backbone(batch).sum().backward()
        type(reference).forward(reference, batch)
    assert captures == [4]
    eager_buffers = dict(reference.named_buffers())
    assert any("running_mean" in name for name in eager_buffers)
    for name, value in model.backbone.named_buffers():
        assert torch.equal(value, eager_buffers[name]), name
