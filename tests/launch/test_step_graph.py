"""``performance.step_graph``: which runs and methods replay their step as one CUDA graph (one log
line saying so, an impossible ``on`` one config error), and, on a GPU, every eligible method's
fit graphed ends where the eager fit ends: weights and logged values, fp32 and bf16-mixed. On the
CPU the driver runs with the capture replaced by a plain call of the same step (its bookkeeping:
logs, EMA, skipped optimizer parts), which must match the eager fit exactly.

On a GPU: ``python -m pytest tests/launch/test_step_graph.py -q -p no:cacheprovider --runslow``.
"""

import pytest
import torch
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from lightning.pytorch import Trainer, seed_everything
from solo.methods import METHODS

from solo_diet.config import ConfigError
from solo_diet.launch.common import trainer_kwargs
from solo_diet.launch.pretrain import build_model
from solo_diet.launch.step_graph import StepGraph, choose_step_graph, method_refusal
from solo_diet.methods.substitutes import substitute_step_parts
from tests._helpers.read_back import CLASSES, PER_CLASS, cases, cuda_cfg, settings_of
from tests._helpers.synthetic import write_image_folder

pytestmark = pytest.mark.solo

CUDA = torch.cuda.is_available()
INELIGIBLE = {"sdiet", "deepclusterv2", "wmse"}  # and their SEM twins
NAMED = ("byol", "dino", "mocov2plus", "swav", "simclr_sem", "diet")  # fp32 besides bf16
EPOCHS = 3  # 8 batches an epoch: 24 steps, 21 of them replayed


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    return root


def fit(method, optimizer, data, graph: str, precision: str, plain: bool = False):
    """A fit of ``EPOCHS`` epochs from seed 0; ``graph``: ``performance.step_graph``; ``plain``:
    the driver with the capture replaced by a plain call. Returns the weights and the metrics."""
    cfg = cuda_cfg(method, data, optimizer)
    cfg.update(max_epochs=EPOCHS, limit_train_batches=8, precision=precision)
    if not CUDA:
        cfg.update(accelerator="cpu", precision="32")
    OmegaConf.update(cfg, "performance.step_graph", graph, force_add=True)
    seed_everything(0)
    run, path = settings_of(cfg)
    method_cls = METHODS[method]
    train = path.pretrain_data(run, lambda dataset: None).source
    model = build_model(cfg, method_cls)
    if plain:
        StepGraph(model, capture=False)
    trainer = Trainer(**trainer_kwargs(cfg, [], logger=None))
    trainer.fit(model, train)
    weights = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    metrics = {k: torch.as_tensor(v).float().cpu() for k, v in trainer.callback_metrics.items()}
    return model, weights, metrics


def assert_same(graphed: dict, eager: dict, what: str) -> None:
    """Equal, or within 1e-6 of each tensor's scale (non-deterministic kernels)."""
    assert graphed.keys() == eager.keys(), what
    far = {}
    for key, value in eager.items():
        scale = max(value.abs().max().item() if value.numel() else 0.0, 1e-12)
        gap = (graphed[key] - value).abs().max().item() if value.numel() else 0.0
        if not gap <= 1e-6 * scale:
            far[key] = f"{gap:.3g} of {scale:.3g}"
    assert not far, f"{what}: {len(far)} of {len(eager)} differ: {dict(list(far.items())[:6])}"


def graphed_cases() -> list:
    eligible = [c for c in cases() if c[0].removesuffix("_sem") not in INELIGIBLE]
    bf16 = [(*c, "bf16-mixed") for c in eligible]
    return bf16 + [(*c, "32") for c in eligible if c[0] in NAMED]


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("method, optimizer, precision", graphed_cases())
def test_the_graphed_fit_ends_where_the_eager_fit_ends(method, optimizer, precision, data):
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
    _, eager_weights, eager_metrics = fit(method, optimizer, data, "off", precision)
    model, weights, metrics = fit(method, optimizer, data, "on", precision)
    assert model.step_graph.graph is not None and model.step_graph.steps == EPOCHS * 8
    assert_same(weights, eager_weights, f"{method} {precision} weights")
    assert_same(metrics, eager_metrics, f"{method} {precision} logged values")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["diet", "byol", "simclr_sem", "swav"])
def test_the_driver_with_a_plain_call_is_the_eager_fit(method, data):
    optimizer = "adamw" if method == "diet" else "lars"
    _, eager_weights, eager_metrics = fit(method, optimizer, data, "off", "32")
    model, weights, metrics = fit(method, optimizer, data, "off", "32", plain=True)
    assert model.step_graph.steps == EPOCHS * 8 and model.step_graph.key is not None
    assert weights.keys() == eager_weights.keys() and metrics.keys() == eager_metrics.keys()
    for key in eager_weights:
        assert torch.equal(weights[key], eager_weights[key]), key
    for key in eager_metrics:
        assert torch.equal(metrics[key], eager_metrics[key]), key


def tiny_model(method: str):
    from tests._helpers.methods import solo_learn_kwargs
    from tests._helpers.tiny import smoke_cfg

    tiny: dict = {}
    cfg = smoke_cfg(method, solo_learn_kwargs(method, tiny), momentum=True, **tiny)
    model = METHODS[method](cfg)
    substitute_step_parts(cfg, model)  # as build_model does
    return cfg, model


@pytest.mark.parametrize("method, reason", [
    ("sdiet", "head rows are staged from the host row store"),
    ("deepclusterv2", "Python batch index"),
    ("wmse_sem", "whitening permutations on the host"),
])  # fmt: skip
def test_an_ineligible_method_says_why(method, reason):
    _, model = tiny_model(method)
    assert reason in method_refusal(model)


@pytest.mark.parametrize("method", ["byol", "dino", "mocov2plus", "swav", "simclr_sem", "diet"])
def test_the_named_methods_are_eligible(method):
    _, model = tiny_model(method)
    assert method_refusal(model) is None


def test_auto_on_a_cpu_says_once_that_it_is_off_and_why(capsys):
    cfg, model = tiny_model("simclr")
    chosen, line = choose_step_graph(cfg, model, "auto")
    assert not chosen and "\n" not in line
    if not CUDA:
        assert line == (
            "solo-diet: training step eager (performance.step_graph=auto: no CUDA device "
            "(accelerator=cpu))"
        )
    assert choose_step_graph(cfg, model, "off") == (
        False,
        "solo-diet: training step eager (performance.step_graph=off)",
    )


def test_an_explicit_on_that_cannot_apply_is_one_config_error():
    cfg, model = tiny_model("sdiet")
    with pytest.raises(ConfigError) as error:
        choose_step_graph(cfg, model, "on")
    message = str(error.value)
    assert "\n" not in message and message.startswith("`performance.step_graph=on` cannot apply")
    assert message.endswith("set it to auto or off.")


@pytest.mark.skipif(not CUDA, reason="the run-level reasons after the device's")
def test_on_a_gpu_the_run_level_reasons_name_the_setting():
    cfg, model = tiny_model("simclr")
    cfg.update(accelerator="gpu", precision="16-mixed")
    assert "GradScaler" in choose_step_graph(cfg, model, "auto")[1]
    cfg.update(precision="bf16-mixed", strategy="ddp")
    assert "strategy=ddp" in choose_step_graph(cfg, model, "auto")[1]
    cfg.update(strategy="auto")
    model.optimizer = "sgd"
    assert "optimizer `sgd`" in choose_step_graph(cfg, model, "auto")[1]
