"""Every shipped evidence spec plans at its real budget: each job composed as ``solo-diet compare``
composes it, then checked by solo-learn's ``parse_cfg`` and the method's own config checks (as
``run_pretrain`` does before reading data), without training. A spec that fails here would fail its
GPU jobs after the window has started."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import solo_diet
from solo_diet.compare.plan.jobs import compose_linear, plan_jobs
from solo_diet.compare.spec.load import load_spec
from solo_diet.launch.pretrain import prepare_run, set_num_samples

pytestmark = pytest.mark.solo

COMPARE = Path(__file__).resolve().parents[2] / "benchmarks" / "compare"
SPECS = sorted(
    p for p in COMPARE.glob("evidence_*.yaml") if OmegaConf.load(p).data.get("root") is None
)
NUM_CLASSES = 10
TRAIN_SIZE = {"fashion": 60_000}  # by a word of the spec's file name; Animal-MNIST otherwise
ANIMAL_MNIST_TRAIN = 8_000
METHOD_OF_CONFIG = {"cplearn_resnet8": "cplearn"}  # otherwise the config is named as its method


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """Class folders of empty files, Animal-MNIST's 8 000 in train: enough for the spec's checks,
    solo-learn's class count and a budget in samples (budgets.py counts the images)."""
    root = tmp_path_factory.mktemp("data")
    for split in ("train", "val"):
        for label in range(NUM_CLASSES):
            (root / split / f"class_{label}").mkdir(parents=True)
    for index in range(ANIMAL_MNIST_TRAIN):
        (root / "train" / f"class_{index % NUM_CLASSES}" / f"{index}.png").touch()
    return root


def expected_backbone(config_path: Path, config_name: str) -> str:
    """ResNet-18 with the CIFAR stem in ``resnet18/`` (but its ResNet-8 CPLearn twin),
    CPLearn's ResNet-8 in the 20-epoch ``configs/``."""
    if config_path.name == "configs" or config_name.endswith("resnet8"):
        return "cp_resnet8"
    return "cifar_resnet18"


def train_size(spec_path: Path) -> int:
    return next((n for word, n in TRAIN_SIZE.items() if word in spec_path.stem), ANIMAL_MNIST_TRAIN)


def test_there_are_evidence_specs():
    assert len(SPECS) >= 5


@pytest.mark.slow  # over 2 s
@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_every_job_composes_at_the_real_budget(spec_path, data_root, tmp_path):
    solo_diet.register()
    spec = load_spec(spec_path, [f"data.root={data_root}", f"output_dir={tmp_path}"])
    runs = {run.name: run for run in spec.runs}
    jobs = plan_jobs(spec)
    compose_linear(spec, tmp_path / "placeholder.ckpt", tmp_path)
    budget, seeds = spec.budget, spec.seeds or [None]
    per_row = {"random_init": len(seeds), "raw_pixels": 1}  # no seed changes the raw pixels
    assert len(jobs) == len(runs) * len(seeds) + sum(per_row[r] for r in spec.reference_rows)
    first_run = [j for j in jobs if j.name == jobs[0].name]
    references = [j for j in jobs if j.reference == "random_init"]
    assert [j.cfg_seed for j in references] == [j.cfg_seed for j in first_run][: len(references)]
    assert len({j.label for j in references}) == len(references)  # progress lines tell them apart
    assert all(j.seed is None for j in jobs if j.reference == "raw_pixels")
    for job in (j for j in jobs if j.reference is None):
        run, cfg = runs[job.name], job.cfg
        assert cfg.name == run.name
        assert cfg.method == METHOD_OF_CONFIG.get(run.config_name, run.config_name), job.key
        assert cfg.backbone.name == expected_backbone(run.config_path, run.config_name), job.key
        epochs = job.budget.epochs  # a run's own budget, or the spec's (budgets.py)
        assert cfg.max_epochs == epochs <= budget.max_epochs
        if not run.own_budget and budget.samples is None:
            assert cfg.max_epochs == budget.max_epochs
        assert cfg.optimizer.batch_size == budget.batch_size
        assert cfg.data.format == spec.data.format
        assert job.seed is None or cfg.seed == job.seed
        assert 1 <= cfg.checkpoint.frequency <= epochs
        assert epochs % cfg.check_val_every_n_epoch == 0  # the last epoch validates
        assert cfg.scheduler.warmup_epochs < epochs, job.key
        if job.seed != seeds[0]:
            continue  # the other seeds' configs differ only in `seed`
        checked, method_cls, contract, *_ = prepare_run(copy.deepcopy(cfg))
        set_num_samples(checked, contract, train_size(spec_path))
        kwargs = method_cls.add_and_assert_specific_cfg(checked).method_kwargs
        if cfg.method == "mocov2plus":  # solo-learn asserts queue_size % batch == 0 per step
            assert kwargs.queue_size % budget.batch_size == 0
            assert kwargs.queue_size <= train_size(spec_path)
        if cfg.method == "swav" and kwargs.queue_size > 0:  # a queue that would never start
            assert kwargs.epoch_queue_starts < epochs
        if cfg.method == "dino":
            assert kwargs.warmup_teacher_temperature_epochs < epochs


@pytest.mark.slow  # over 2 s
def test_the_paper_budget_spec_gives_each_run_its_papers_budget(data_root, tmp_path):
    """DIET and s-DIET at 5000 epochs, the baselines at 1000, DIET and s-DIET once more at
    SimCLR's compute (samples, views counted), and SimCLR on two views of DIET's augmentation."""
    solo_diet.register()
    spec_path = COMPARE / "evidence_paper_budget_animal_mnist.yaml"
    spec = load_spec(spec_path, [f"data.root={data_root}", f"output_dir={tmp_path}"])
    jobs = {j.name: j for j in plan_jobs(spec) if j.reference is None}
    epochs = {name: job.budget.epochs for name, job in jobs.items()}
    assert epochs == {
        "diet": 5000,
        "sdiet": 5000,
        "simclr": 1000,
        "mocov2plus": 1000,
        "vicreg": 1000,
        "simclr_diet_aug": 1000,
        "diet_matched": 2000,
        "sdiet_matched": 2000,
    }
    for matched in ("diet_matched", "sdiet_matched"):
        assert jobs[matched].budget.samples == jobs["simclr"].budget.samples == 15_872_000
        assert jobs[matched].budget.matched == "samples"
    diet_views, simclr_views = (
        jobs["diet"].cfg.augmentations,
        jobs["simclr_diet_aug"].cfg.augmentations,
    )
    assert [a.num_crops for a in simclr_views] == [2]
    assert simclr_views[0].rrc == diet_views[0].rrc and simclr_views[0].get("random_erasing") == (
        diet_views[0].get("random_erasing")
    )
