"""docs/adding-a-method.md end to end: a toy index-based method, defined in one file with only the
method contract, put where the guide says (``solo_diet/methods/<name>.py``, here a temporary folder
on that package's path; or a package of one's own declaring the ``solo_diet.methods`` entry point)
and nothing else edited: registered, run through the code of every
contract-chosen test of the suite (the GPU data path, the read-back guard's CPU stand-in, the SEM
twin, the typo check), pretrained with `solo-diet pretrain` and compared with `solo-diet compare`
on a tiny CPU budget."""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import solo.methods
import torch
from solo.methods import METHODS

import solo_diet
import solo_diet.methods
from solo_diet.cli.main import main
from solo_diet.core.errors import ConfigError
from solo_diet.methods.contract import method_contract, plugin_methods
from tests._helpers import gpu_path, methods, read_back
from tests._helpers.cli import overrides
from tests._helpers.compare import SHIPPED_SPEC
from tests._helpers.compare import four_methods_overrides as tiny_overrides
from tests._helpers.synthetic import write_image_folder
from tests._helpers.tiny import tiny_cfg

pytestmark = pytest.mark.solo

CONFIGS = SHIPPED_SPEC.parent / "configs"

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "adding-a-method.md"
TOY_FILE = Path(__file__).with_name("toy_method.py")
NUM_TRAIN = 5 * 6


def guide_block(language: str, containing: str) -> str:
    """The guide's first ``language`` code block that contains ``containing``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    return next(block for block in blocks if containing in block)


TOY_MODULE = "solo_diet.methods.toy_index"
# the tests whose methods come from the registry and their contract, never from a list of names
CONTRACT_CHOSEN = [
    ROOT / "tests" / folder / f"{name}.py"
    for folder, name in [
        ("launch", "test_gpu_path"),
        ("launch", "test_no_host_sync"),
        ("methods", "test_sem"),
        ("methods", "test_every_method"),
        ("_helpers", "gpu_path"),
        ("_helpers", "read_back"),
        ("_helpers", "methods"),
    ]
]


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    """The guide's steps 2 and 3: the toy's file as ``solo_diet/methods/toy_index.py`` (a copy in
    a temporary folder added to the package's path, so no file of the repository changes), then
    ``solo_diet.register()`` finds it."""
    package = tmp_path / "package"
    package.mkdir()
    shutil.copy(TOY_FILE, package / "toy_index.py")
    monkeypatch.setattr(solo_diet.methods, "__path__", [*solo_diet.methods.__path__, str(package)])
    registered = solo_diet.register()
    assert {"toy_index", "toy_index_sem"} <= set(registered)
    yield METHODS["toy_index"]
    _unregister_toy(TOY_MODULE)


def _unregister_toy(*modules: str) -> None:
    for name in ("toy_index", "toy_index_sem"):
        cls = METHODS.pop(name, None)
        if cls is not None and getattr(solo.methods, cls.__name__, None) is cls:
            delattr(solo.methods, cls.__name__)
    for module in modules:
        sys.modules.pop(module, None)


OWN_MODULE = "my_methods.toy"


@pytest.fixture
def own_package(tmp_path) -> Path:
    """The guide's other way: the toy's file in a package of one's own (``my_methods``, outside
    ``solo_diet``) whose installed metadata declares the entry point, as pip writes it from a
    pyproject's ``[project.entry-points."solo_diet.methods"]``; returns the folder to put on the
    path."""
    site = tmp_path / "site"
    (site / "my_methods").mkdir(parents=True)
    (site / "my_methods" / "__init__.py").write_text("")
    shutil.copy(TOY_FILE, site / "my_methods" / "toy.py")
    info = site / "my_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    entry = guide_block("toml", "solo_diet.methods").split("\n", 1)[1].replace('"', "")
    (info / "entry_points.txt").write_text(f"[solo_diet.methods]\n{entry}")
    return site


@pytest.fixture
def toy_from_own_package(own_package, monkeypatch):
    """The toy registered from ``my_methods`` through its entry point (also for subprocesses)."""
    monkeypatch.syspath_prepend(str(own_package))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(own_package), str(ROOT)]))
    assert {"toy_index", "toy_index_sem"} <= set(solo_diet.register())
    yield METHODS["toy_index"]
    _unregister_toy(OWN_MODULE, "my_methods")


def test_a_method_of_ones_own_package_is_registered_in_a_fresh_process(own_package):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(own_package), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-m", "solo_diet.cli.main", "methods"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    listed = [line.split() for line in done.stdout.splitlines()]
    assert ["toy_index", "my_methods", f"{OWN_MODULE}.ToyIndexMethod"] in listed, done.stderr


@pytest.fixture
def configs(tmp_path) -> Path:
    """The compare configs with the guide's toy_index.yaml added."""
    folder = tmp_path / "configs"
    shutil.copytree(CONFIGS, folder)
    (folder / "toy_index.yaml").write_text(guide_block("yaml", "- base"))
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
    assert toy_registered.__module__ == TOY_MODULE
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


@pytest.mark.parametrize("where", ["toy_registered", "toy_from_own_package"])
def test_pretrain_then_compare_the_toy_method(where, request, configs, data, tmp_path):
    assert request.getfixturevalue(where).__module__ in (TOY_MODULE, OWN_MODULE)
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


def test_the_guide_pretrain_config_made_from_the_diet_one_trains(toy_registered, tmp_path):
    """Step 4 taken literally: a copy of the DIET config with `name`, `method` and the whole
    `method_kwargs` block replaced by the guide's."""
    from omegaconf import OmegaConf

    folder = tmp_path / "custom"
    shutil.copytree(ROOT / "solo_diet" / "configs" / "pretrain" / "custom", folder)
    config = OmegaConf.load(folder / "diet.yaml")
    for key, value in OmegaConf.create(guide_block("yaml", '"toy_index-custom"')).items():
        config[key] = value
    OmegaConf.save(config, folder / "toy_index.yaml")
    data = write_image_folder(tmp_path / "images" / "train", num_classes=5, per_class=6, seed=0)
    write_image_folder(tmp_path / "images" / "val", num_classes=5, per_class=2, seed=1)
    argv = ["pretrain", "--config-path", str(folder), "--config-name", "toy_index"]
    assert main(argv + overrides(data.parent, tmp_path / "out")) == 0
    (checkpoint,) = (tmp_path / "out" / "toy_index").glob("*/*.ckpt")
    assert json.loads((checkpoint.parent / "args.json").read_text())["name"] == "toy_index-custom"


def test_the_guide_test_template_passes_for_the_toy(toy_registered, tmp_path):
    module_path = tmp_path / "test_toy_index.py"
    module_path.write_text(guide_block("python", 'METHOD = "toy_index"'))
    spec = importlib.util.spec_from_file_location("guide_test_toy_index", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = sorted(name for name in vars(module) if name.startswith("test_"))
    assert len(tests) == 3
    module.test_its_defaults_and_a_refused_value()
    module.test_a_step_trains_its_head()
    module.test_a_checkpoint_round_trip(tmp_path)


def test_the_contract_chosen_tests_run_the_toy_as_they_run_every_method(toy_registered, tmp_path):
    """The code of the suite's tests that take every registered method, run for the toy. Each
    configures it from its contract alone: a list of method names coming back (for num_samples,
    views or tiny settings) fails here, as the toy is in none."""
    data = tmp_path / "gpu_images"
    for split, per_class, seed in (("train", gpu_path.PER_CLASS, 0), ("val", 2, 1)):
        write_image_folder(
            data / split, num_classes=gpu_path.CLASSES, per_class=per_class, seed=seed
        )
    for method in ("toy_index", "toy_index_sem"):
        model = gpu_path.check_fast_dev_run_through_the_gpu_path(method, data)
        # the contract's smoke settings and views reached the model, not defaults or a name list
        assert model.z_dim == 16 and model.hp.temperature == 0.5 and model.num_crops == 1
        assert model.hp.num_samples == gpu_path.NUM_TRAIN
    guarded = tmp_path / "guarded_images"
    classes, per_class = read_back.CLASSES, read_back.PER_CLASS
    write_image_folder(guarded / "train", num_classes=classes, per_class=per_class, seed=0)
    read_back.check_cpu_stand_in_sees_no_read_back("toy_index", "lars", guarded, tmp_path)
    methods.check_twin_builds_and_fits("toy_index")
    methods.check_a_misspelt_method_kwarg_is_refused("toy_index")
    methods.check_one_training_step("toy_index")
    assert "toy_index" in methods.declared_methods()
    assert "toy_index" in methods.registered_methods()


def test_the_contract_chosen_tests_list_no_method_by_name():
    """No tuple, list or set of method names in the contract-chosen tests holds one of our
    methods (``("diet", "sdiet")`` would choose by name; a command line naming one config, or a
    dict of documented per-method facts, does not)."""
    solo_diet.register()
    ours = set(plugin_methods())
    assert {"diet", "sdiet", "cplearn"} <= ours
    for path in CONTRACT_CHOSEN:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                listed = names & ours if names and names <= set(METHODS) else set()
                assert not listed, f"{path.name}:{node.lineno} lists {sorted(listed)} by name"
