"""``performance.step_graph``: which runs and methods replay their step as one CUDA graph (one log
line saying so, an impossible ``on`` one config error, ``auto`` only for what a GPU showed equal),
and, on a GPU, every eligible method's fit graphed ends where the eager fit ends: weights, optimizer
state, EMA weights, online classifier and logged values, fp32 and bf16-mixed. On the CPU the driver
runs with the capture replaced by a plain call of the same step (its bookkeeping: logs, EMA,
skipped optimizer parts), which must match the eager fit exactly after every step.

On a GPU: ``STEP_GRAPH_TABLE=$OUT/step_graph.tsv python -m pytest tests/launch/test_step_graph.py
-q -p no:cacheprovider --runslow``. Each case appends its row to that file (and prints it): the
largest ``|a - b|.max() / |b|.max()`` over the tensors after the first replayed step and after the
last, the worst tensor named; the first step where any part differs and which parts; the graph
against the eager step with the graph's own configuration (capturable AdamW, lr and tau on the
device: the capture alone), then against ``off`` (plain eager); the verdict.
"""

import math
import os

import pytest
import torch
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from lightning.pytorch import Callback, Trainer, seed_everything
from solo.methods import METHODS

from solo_diet.core.errors import ConfigError
from solo_diet.launch.common import trainer_kwargs
from solo_diet.launch.pretrain import build_model
from solo_diet.launch.settings import parse_performance_settings
from solo_diet.launch.step_graph import (
    WARMUP_STEPS,
    StepGraph,
    choose_step_graph,
    method_refusal,
)
from solo_diet.methods.substitutes import substitute_step_parts
from tests._helpers.read_back import CLASSES, PER_CLASS, cases, cuda_cfg, settings_of
from tests._helpers.synthetic import write_image_folder

pytestmark = pytest.mark.solo

CUDA = torch.cuda.is_available()
INELIGIBLE = {"sdiet", "deepclusterv2", "wmse"}  # and their SEM twins
NAMED = ("byol", "dino", "mocov2plus", "swav", "simclr_sem", "diet")  # fp32 besides bf16
EPOCHS = 3  # 8 batches an epoch: 24 steps, 21 of them replayed
STEPS, FIRST_REPLAYED = EPOCHS * 8, WARMUP_STEPS + 1
PARTS = ("logged values", "weights", "optimizer state", "EMA weights", "online classifier")
SAME_CONFIG = {"capture": False, "device_scalars": True}  # the graph's step, called plainly
HEADER = (
    "method\toptimizer\tprecision\tdiff_1step\tdiff_24steps\tfirst_differing"
    "\toff_diff_1step\toff_diff_24steps\toff_first_differing\tverdict"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    return root


def _part(name: str, optimizer_state: bool = False) -> str:
    root = name.split(".")[0]
    if root in ("classifier", "momentum_classifier"):
        return "online classifier"
    if root.startswith("momentum_"):
        return "EMA weights"
    return "optimizer state" if optimizer_state else "weights"


def snapshot(trainer, model) -> dict:
    """The model's :data:`PARTS`, each ``{name: float copy on the host}``."""
    parts: dict = {part: {} for part in PARTS}
    take = lambda value: torch.as_tensor(value).detach().to("cpu", torch.float32, copy=True)  # noqa: E731
    for name, value in model.state_dict().items():
        parts[_part(name)][name] = take(value)
    names = {id(p): name for name, p in model.named_parameters()}
    for p, state in trainer.optimizers[0].state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                parts[_part(names[id(p)], True)][f"{names[id(p)]}.{key}"] = take(value)
    parts["logged values"] = {k: take(v) for k, v in trainer.callback_metrics.items()}
    return parts


class Snapshots(Callback):
    """A :func:`snapshot` after every step: at the next batch's start (the step's EMA done in
    ``on_train_batch_end``) and at the end of the fit."""

    def __init__(self):
        self.taken: list[dict] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step:
            self.taken.append(snapshot(trainer, pl_module))

    def on_train_end(self, trainer, pl_module):
        self.taken.append(snapshot(trainer, pl_module))


def fit(method, optimizer, data, graph: str, precision: str, driver: dict | None = None):
    """A fit of ``EPOCHS`` epochs from seed 0; ``graph``: ``performance.step_graph``; ``driver``:
    a :class:`StepGraph` of these arguments installed besides. Returns the model and a
    :func:`snapshot` after each step."""
    cfg = cuda_cfg(method, data, optimizer)
    cfg.update(max_epochs=EPOCHS, limit_train_batches=8, precision=precision)
    if not CUDA:
        cfg.update(accelerator="cpu")
    OmegaConf.update(cfg, "performance.step_graph", graph, force_add=True)
    seed_everything(0)
    run, path = settings_of(cfg)
    method_cls = METHODS[method]
    train = path.pretrain_data(run, lambda dataset: None).source
    model = build_model(cfg, method_cls, parse_performance_settings(cfg))
    if driver is not None:
        StepGraph(model, **driver)
    snapshots = Snapshots()
    trainer = Trainer(**trainer_kwargs(cfg, [snapshots], logger=None))
    trainer.fit(model, train)
    assert len(snapshots.taken) == STEPS
    return model, snapshots.taken


def gap(a: dict, b: dict) -> tuple[float, str]:
    """The largest ``|a - b|.max() / |b|.max()`` over ``b``'s tensors (inf for a tensor one side
    lacks or shapes differently) and that tensor's name."""
    worst = (0.0, "")
    for name in sorted(a.keys() | b.keys()):
        x, y = a.get(name), b.get(name)
        if x is None or y is None or x.shape != y.shape:
            rel = math.inf
        elif torch.equal(x, y) or not y.numel():
            rel = 0.0
        else:
            rel = (x - y).abs().max().item() / max(y.abs().max().item(), 1e-12)
            rel = math.inf if math.isnan(rel) else rel
        worst = max(worst, (rel, name))
    return worst


def compare(taken: list[dict], reference: list[dict]) -> dict:
    """Per step and part the :func:`gap`; the worst after the first replayed step and after
    the last (its part and tensor named), where the parts first differ, the worst of all."""
    steps = [{part: gap(a[part], b[part]) for part in PARTS} for a, b in zip(taken, reference)]

    def worst(i: int) -> str:
        part, (rel, name) = max(steps[i].items(), key=lambda item: item[1][0])
        return "0" if rel == 0 else f"{rel:.2g} ({part}: {name})"

    differing = [p for p in PARTS if any(s[p][0] > 0 for s in steps)]
    at = next((i for i, s in enumerate(steps) if any(s[p][0] > 0 for p in PARTS)), None)
    first = (
        "-"
        if at is None
        else f"step {at + 1}: " + ", ".join(p for p in PARTS if steps[at][p][0] > 0)
    )
    return {
        "1step": worst(FIRST_REPLAYED - 1),
        "last": worst(-1),
        "first": first,
        "max": max(s[p][0] for s in steps for p in PARTS),
        "parts": differing,
    }


def verdict(compared: dict) -> str:
    """The issue's criterion at every step: bitwise, else within 1e-6 of each tensor's scale."""
    if compared["max"] == 0:
        return "equal"
    return "within 1e-6" if compared["max"] <= 1e-6 else "differs"


def record_row(cells: list[str]) -> str:
    """One row of the table, appended to ``$STEP_GRAPH_TABLE`` (its header first) and printed."""
    row = "\t".join(cells)
    path = os.environ.get("STEP_GRAPH_TABLE")
    if path:
        new = not os.path.exists(path) or not os.path.getsize(path)
        with open(path, "a") as table:
            table.write((HEADER + "\n" if new else "") + row + "\n")
    print(row, flush=True)
    return row


def graphed_cases() -> list:
    eligible = [c for c in cases() if c[0].removesuffix("_sem") not in INELIGIBLE]
    bf16 = [(*c, "bf16-mixed") for c in eligible]
    return bf16 + [(*c, "32") for c in eligible if c[0] in NAMED]


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("method, optimizer, precision", graphed_cases())
def test_the_graphed_fit_ends_where_the_eager_fit_ends(method, optimizer, precision, data):
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
    model, graphed = fit(method, optimizer, data, "on", precision)
    assert model.step_graph.graph is not None and model.step_graph.steps == STEPS
    _, same = fit(method, optimizer, data, "off", precision, driver=SAME_CONFIG)
    _, eager = fit(method, optimizer, data, "off", precision)
    capture, plain = compare(graphed, same), compare(graphed, eager)
    cells = [against[c] for against in (capture, plain) for c in ("1step", "last", "first")]
    row = record_row([method, model.optimizer, precision, *cells, verdict(capture)])
    assert verdict(capture) != "differs", row


@pytest.mark.slow
@pytest.mark.parametrize("method, precision", [
    ("diet", "32"), ("byol", "32"), ("simclr_sem", "32"), ("swav", "32"),
    ("simclr", "bf16-mixed"),  # the capture's autocast: two views' casts cached, backward off
])  # fmt: skip
def test_the_driver_with_a_plain_call_is_the_eager_fit(method, precision, data):
    optimizer = "adamw" if method == "diet" else "lars"
    _, eager = fit(method, optimizer, data, "off", precision)
    model, plain = fit(method, optimizer, data, "off", precision, driver={"capture": False})
    assert model.step_graph.steps == STEPS and model.step_graph.key is not None
    compared = compare(plain, eager)
    assert compared["max"] == 0, compared


def tiny_model(method: str):
    from tests._helpers.methods import solo_learn_kwargs
    from tests._helpers.tiny import smoke_cfg

    tiny: dict = {}
    cfg = smoke_cfg(method, solo_learn_kwargs(method, tiny), momentum=True, **tiny)
    model = METHODS[method](cfg)
    substitute_step_parts(model)  # as build_model does
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
