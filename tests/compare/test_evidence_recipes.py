"""Every ResNet-18 evidence recipe (``benchmarks/compare/resnet18/``) trains one CPU step at 32 px
through the GPU data path's CPU fallback, composed as ``solo-diet compare`` composes its jobs: a
recipe that breaks in the first step would otherwise break on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import solo_diet
from solo_diet.compare.plan.jobs import compose_run
from solo_diet.compare.spec.load import load_spec
from solo_diet.compare.spec.settings import Run
from solo_diet.launch.pretrain import run_pretrain
from tests._helpers.compare import write_tiny_images

pytestmark = pytest.mark.solo

COMPARE = Path(__file__).resolve().parents[2] / "benchmarks" / "compare"
RECIPES = COMPARE / "resnet18"
NOT_PRETRAINING = {"base", "linear"}
NAMES = sorted(p.stem for p in RECIPES.glob("*.yaml") if p.stem not in NOT_PRETRAINING)
SMALL_SEM = ["method_kwargs.sem.num_simplices=8"]  # L = 5000 takes GBs of CPU memory


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    solo_diet.register()
    data_root = write_tiny_images(tmp_path_factory.mktemp("images"))
    return load_spec(
        COMPARE / "evidence_small_data_animal_mnist.yaml",
        [
            f"data.root={data_root}",
            f"output_dir={tmp_path_factory.mktemp('cmp')}",
            "data.format=gpu",
            "budget.max_epochs=1",
            "budget.batch_size=4",
            "budget.limit_train_batches=1",
            "trainer=[accelerator=cpu,precision=32,data.num_workers=0]",
            "pretrain_overrides=[++limit_val_batches=1,++num_sanity_val_steps=0]",
        ],
    )


@pytest.mark.parametrize("name", NAMES)
def test_recipe_trains_one_step(spec, name, tmp_path):
    overrides = SMALL_SEM if name.endswith("_sem") else []
    cfg, _ = compose_run(spec, Run(name, RECIPES, name, tuple(overrides)), tmp_path, seed=0)
    checkpoint = run_pretrain(cfg)
    assert checkpoint is not None and Path(checkpoint).is_file()
