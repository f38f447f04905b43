"""docs/adding-a-method.md end to end: a toy index-based method, defined in one file with only the
method contract, registered, pretrained with `solo-diet pretrain` and compared with `solo-diet
compare` on a tiny CPU budget."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from tests._solo import skip_without_solo

pytestmark = pytest.mark.solo
skip_without_solo()

import torch  # noqa: E402
from solo.methods import METHODS  # noqa: E402

import solo_diet  # noqa: E402
from solo_diet.cli.main import main  # noqa: E402
from solo_diet.config import ConfigError  # noqa: E402
from solo_diet.data.synthetic import write_image_folder  # noqa: E402
from solo_diet.methods import PLUGIN_METHODS  # noqa: E402
from solo_diet.methods.contract import method_contract  # noqa: E402
from solo_diet.methods.testing import tiny_cfg  # noqa: E402
from tests.compare._compare import SHIPPED_SPEC  # noqa: E402
from tests.compare.test_compare import tiny_overrides  # noqa: E402

CONFIGS = SHIPPED_SPEC.parent / "configs"

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adding-a-method.md"
TOY_FILE = Path(__file__).with_name("toy_method.py")
NUM_TRAIN = 5 * 6


def guide_block(language: str, containing: str) -> str:
    """The guide's first ``language`` code block that contains ``containing``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    return next(block for block in blocks if containing in block)


@pytest.fixture
def toy_registered(monkeypatch):
    """The guide's registration step: one PLUGIN_METHODS line, then solo_diet.register()."""
    monkeypatch.setitem(PLUGIN_METHODS, "toy_index", "tests.cli.toy_method:ToyIndexMethod")
    solo_diet.register()
    yield METHODS["toy_index"]
    for name in ("toy_index", "toy_index_sem"):
        METHODS.pop(name, None)


@pytest.fixture
def configs(tmp_path) -> Path:
    """The compare configs with the guide's toy_index.yaml added."""
    folder = tmp_path / "configs"
    shutil.copytree(CONFIGS, folder)
    (folder / "toy_index.yaml").write_text(guide_block("yaml", 'method: "toy_index"'))
    return folder


@pytest.fixture
def data(tmp_path) -> Path:
    root = tmp_path / "images"
    write_image_folder(root / "train", num_classes=5, per_class=6, size=32, seed=0)
    write_image_folder(root / "val", num_classes=5, per_class=3, size=32, seed=1)
    return root


def test_the_guide_shows_the_toy_file_as_it_is():
    assert guide_block("python", "class ToyIndexMethod") == TOY_FILE.read_text()


def test_registration_gives_the_contract_and_a_sem_twin(toy_registered):
    contract = method_contract(toy_registered)
    assert contract.uses_sample_indexes and contract.sem_unsupported is None
    assert contract.train_batch_sampler(tiny_cfg("toy_index"), range(8)) is None
    assert "toy_index_sem" in METHODS
    model = toy_registered(tiny_cfg("toy_index", {"num_samples": 8, "proj_output_dim": 16}))
    assert model.cfg.method_kwargs.temperature == 1.0 and model.cfg.method_kwargs.proj_layers == 1
    assert model.head.weight.shape == (8, 16)
    with pytest.raises(ConfigError, match="method_kwargs.temperature"):
        toy_registered(tiny_cfg("toy_index", {"num_samples": 8, "temperature": 0.0}))
    with pytest.raises(ConfigError, match="method_kwargs.num_samples"):
        toy_registered(tiny_cfg("toy_index"))


def test_pretrain_then_compare_the_toy_method(toy_registered, configs, data, tmp_path):
    pretrain = [
        "pretrain",
        "--config-path",
        str(configs),
        "--config-name",
        "toy_index",
        f"++data.train_path={data / 'train'}",
        f"++data.val_path={data / 'val'}",
        f"checkpoint.dir={tmp_path / 'pretrain'}",
        "data.num_workers=0",
        "backbone.kwargs.width=8",
        "optimizer.batch_size=4",
        "max_epochs=1",
        "accelerator=cpu",
        "precision=32",
        "++limit_train_batches=2",
        "++limit_val_batches=1",
        "++num_sanity_val_steps=0",
        "++enable_progress_bar=False",
    ]
    assert main(pretrain) == 0
    (checkpoint,) = (tmp_path / "pretrain" / "toy_index").glob("*/*.ckpt")
    args = json.loads((checkpoint.parent / "args.json").read_text())
    assert args["method"] == "toy_index" and args["method_kwargs"]["num_samples"] == NUM_TRAIN
    state = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert state["head.weight"].shape == (NUM_TRAIN, 16)

    out = tmp_path / "compare"
    run = f"runs=[{{name: toy, config_name: toy_index, config_path: {configs}}}]"
    assert main(["compare", str(SHIPPED_SPEC), *tiny_overrides(data, out), run]) == 0
    with (out / "results.csv").open() as f:
        (row,) = csv.DictReader(f)
    assert row["run"] == "toy" and row["method"] == "toy_index" and int(row["epochs"]) == 2
    assert 0.0 <= float(row["knn_acc1"]) <= 100.0 and 0.0 <= float(row["z_knn_acc1"]) <= 100.0
    assert 1.0 <= float(row["z_rankme"]) <= 16.0 + 1e-3  # z has 16 dimensions
    assert 1.0 <= float(row["z_lidar"]) <= 5.0 + 1e-3  # min(d, n - 1) with n = 6 surrogate classes
    report = (out / "report.md").read_text()
    assert "z_knn_acc1" in report
    assert "- `z_*`: the `z` representation its method declares (`extra_evaluations`)" in report
