"""`solo-diet pretrain` -> checkpoint -> `solo-diet linear` on a tiny real ImageFolder, with the
shipped YAMLs."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import json
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from solo.methods import METHODS

from solo_diet.cli.main import main
from solo_diet.core.errors import ConfigError
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.linear import build_backbone, load_backbone_weights
from solo_diet.launch.pretrain import run_pretrain
from solo_diet.launch.settings import dali_installed
from tests._helpers.synthetic import write_image_folder

pytestmark = pytest.mark.solo

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
NUM_TRAIN = 5 * 6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=5, per_class=6, seed=0)
    write_image_folder(root / "val", num_classes=5, per_class=2, seed=1)
    return root


def tiny_overrides(data: Path, out: Path) -> list:
    return [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        "data.num_workers=0",
        f"checkpoint.dir={out}",
        "auto_resume.enabled=False",
        "wandb.enabled=False",
        "max_epochs=2",
        "accelerator=cpu",
        "devices=1",
        "precision=32",
        "++limit_train_batches=2",
        "++limit_val_batches=1",
        "++num_sanity_val_steps=0",
        "++enable_progress_bar=False",
    ]


def pretrain_overrides(data: Path, out: Path) -> list:
    return tiny_overrides(data, out) + [
        "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8",
        "augmentations.0.crop_size=32",
        "optimizer.batch_size=4",
    ]


@pytest.fixture(scope="module")
def diet_run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    argv = [
        "pretrain",
        "--config-path",
        str(SCRIPTS / "pretrain" / "custom"),
        "--config-name",
        "diet.yaml",
    ]
    assert main(argv + pretrain_overrides(data, out)) == 0
    ckpts = sorted((out / "diet").glob("*/*.ckpt"))
    assert len(ckpts) == 1, ckpts
    return ckpts[0]


def test_pretrain_writes_num_samples_and_checkpoint(diet_run):
    args = json.loads((diet_run.parent / "args.json").read_text())
    assert args["method"] == "diet"
    assert args["method_kwargs"]["num_samples"] == NUM_TRAIN
    state = torch.load(diet_run, map_location="cpu", weights_only=False)["state_dict"]
    assert state["head.weight"].shape == (NUM_TRAIN, 8)


def test_load_from_checkpoint_with_args_json(diet_run):
    args = OmegaConf.create(json.loads((diet_run.parent / "args.json").read_text()))
    model = METHODS["diet"].load_from_checkpoint(diet_run, strict=True, cfg=args)
    state = torch.load(diet_run, map_location="cpu", weights_only=False)["state_dict"]
    torch.testing.assert_close(model.head.weight, state["head.weight"])


def test_every_backbone_key_loads(diet_run):
    args = OmegaConf.create(json.loads((diet_run.parent / "args.json").read_text()))
    args.pretrain_method = "diet"
    backbone = build_backbone(args)
    loaded = load_backbone_weights(backbone, str(diet_run))
    assert loaded == len(backbone.state_dict())
    state = torch.load(diet_run, map_location="cpu", weights_only=False)["state_dict"]
    for key, value in backbone.state_dict().items():
        torch.testing.assert_close(value, state[f"backbone.{key}"])


def test_linear_on_pretrained_checkpoint(diet_run, data, tmp_path, capsys):
    argv = ["linear", "--config-path", str(SCRIPTS / "linear" / "custom"), "--config-name", "diet"]
    overrides = tiny_overrides(data, tmp_path) + [
        f"pretrained_feature_extractor='{diet_run}'",
        "data.augmentations.crop_size=32",
        "optimizer.batch_size=4",
    ]
    assert main(argv + overrides) == 0
    assert "linear probe top-1 on the backbone representation:" in capsys.readouterr().out


def test_resume_from_checkpoint_continues(diet_run, data, tmp_path):
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", pretrain_overrides(data, tmp_path)
    )
    cfg.max_epochs = 3
    cfg.resume_from_checkpoint = str(diet_run)
    ckpt = run_pretrain(cfg)
    resumed = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert resumed["epoch"] == 2


def test_wrong_num_samples_is_refused(data, tmp_path):
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", pretrain_overrides(data, tmp_path)
    )
    cfg.method_kwargs.num_samples = NUM_TRAIN + 1
    with pytest.raises(ConfigError, match="num_samples"):
        run_pretrain(cfg)


def test_dali_without_encoded_indexes_is_refused(data, tmp_path):
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", pretrain_overrides(data, tmp_path)
    )
    cfg.data.format = "dali"
    with pytest.raises(ConfigError, match="encode_indexes_into_labels"):
        run_pretrain(cfg)


@pytest.mark.skipif(dali_installed(), reason="NVIDIA DALI is installed")
def test_dali_without_dali_installed_is_one_clear_error(data, tmp_path):
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", pretrain_overrides(data, tmp_path)
    )
    cfg.data.format = "dali"
    OmegaConf.update(cfg, "dali.encode_indexes_into_labels", True, force_add=True)
    with pytest.raises(ConfigError, match="`data.format: dali` needs NVIDIA DALI, which is not"):
        run_pretrain(cfg)


def test_unknown_method_is_refused(data, tmp_path):
    cfg = compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", pretrain_overrides(data, tmp_path)
    )
    cfg.method = "diet_typo"
    with pytest.raises(ConfigError, match="lists every registered method"):
        run_pretrain(cfg)


def test_missing_config_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="config-name"):
        compose_cfg(str(tmp_path), "nope", [])


def test_methods_command_lists_plugin_and_solo_methods(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "diet" in out and "solo-diet" in out and "simclr" in out and "solo-learn" in out


def test_solo_script_sees_plugin_methods(tmp_path, capsys):
    script = tmp_path / "probe_registry.py"
    script.write_text(
        "import sys\n"
        "from solo.methods import METHODS\n"
        "print('ARGS', sys.argv[1:], 'diet' in METHODS, 'simclr_sem' in METHODS)\n"
    )
    assert main(["solo-script", str(script), "--k", "20"]) == 0
    assert "ARGS ['--k', '20'] True True" in capsys.readouterr().out


@pytest.mark.slow
def test_pretrain_ddp_two_cpu_processes(data, tmp_path):
    """`devices=2 strategy=ddp` on the CPU: two gloo processes, lr scaled for 2 devices, one
    checkpoint."""
    import subprocess
    import sys

    overrides = [o for o in pretrain_overrides(data, tmp_path) if not o.startswith("devices=")]
    command = [
        sys.executable,
        "-m",
        "solo_diet.cli.main",
        "pretrain",
        "--config-path",
        str(SCRIPTS / "pretrain" / "custom"),
        "--config-name",
        "diet",
        "devices=2",
        "strategy=ddp",
    ] + overrides
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpts = sorted((tmp_path / "diet").glob("*/*.ckpt"))
    assert len(ckpts) == 1
    args = json.loads((ckpts[0].parent / "args.json").read_text())
    assert args["devices"] == [0, 1] and args["method_kwargs"]["num_samples"] == NUM_TRAIN
    assert args["optimizer"]["lr"] == pytest.approx(1e-3 * 4 * 2 / 256)


def test_data_command_writes_animal_mnist_image_folder(tmp_path):
    pytest.importorskip("animal_mnist", reason="pip install --no-deps animal-mnist==0.4")
    assert main(["data", "animal-mnist", str(tmp_path / "am"), "--limit", "200"]) == 0
    train = sorted((tmp_path / "am" / "train").iterdir())
    assert [p.name for p in train] == sorted(
        ["bear", "bird", "cat", "cow", "dog", "elephant", "giraffe", "horse", "sheep", "zebra"]
    )
    assert sum(len(list(p.iterdir())) for p in train) == 200
    assert sum(len(list(p.iterdir())) for p in (tmp_path / "am" / "val").iterdir()) == 2000


def test_data_command_replaces_its_earlier_write_and_refuses_foreign_folders(tmp_path, capsys):
    pytest.importorskip("animal_mnist", reason="pip install --no-deps animal-mnist==0.4")
    root = tmp_path / "am"

    def train_images() -> list[str]:
        return sorted(str(p.relative_to(root)) for p in (root / "train").rglob("*.png"))

    assert main(["data", "animal-mnist", str(root), "--limit", "300"]) == 0
    assert len(train_images()) == 300
    assert main(["data", "animal-mnist", str(root), "--limit", "100"]) == 0
    fewer = train_images()
    assert len(fewer) == 100  # no image of the larger write is left behind
    (root / ".complete").unlink()
    (root / ".writing").write_text("animal-mnist 100")  # an interrupted write of ours
    assert main(["data", "animal-mnist", str(root), "--limit", "100"]) == 0
    assert train_images() == fewer and not (root / ".writing").exists()

    foreign = tmp_path / "mine"
    (foreign / "train" / "cat").mkdir(parents=True)
    (foreign / "train" / "cat" / "keep.png").write_bytes(b"")
    capsys.readouterr()
    assert main(["data", "animal-mnist", str(foreign), "--limit", "100"]) != 0
    assert "already holds train/ that `solo-diet data` did not write" in capsys.readouterr().err
    assert (foreign / "train" / "cat" / "keep.png").exists()


def test_fashion_mnist_without_its_files_is_one_clear_error(tmp_path):
    from solo_diet.cli.data import load_fashion_mnist
    from solo_diet.launch.errors import DataError

    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")  # one of four files
    for dirs in [(str(tmp_path / "absent"),), (str(tmp_path),)]:
        with pytest.raises(DataError, match="four IDX files not found in .*apt-get install"):
            load_fashion_mnist(dirs)


def test_a_data_write_that_cannot_be_done_makes_no_folder(tmp_path, monkeypatch):
    from solo_diet.cli import data as data_cli
    from solo_diet.launch.errors import DataError

    absent = (str(tmp_path / "absent"),)  # Fashion-MNIST's files not installed
    loader = (lambda: data_cli.load_fashion_mnist(absent), data_cli.FASHION_CLASSES)
    monkeypatch.setitem(data_cli.DATASETS, "fashion-mnist", loader)
    with pytest.raises(DataError, match="four IDX files not found"):
        data_cli.write_dataset("fashion-mnist", str(tmp_path / "fm"))
    labels = np.repeat(np.arange(10), 800)  # Animal-MNIST's 8000 training labels
    fake = (lambda: (np.zeros((8000, 2, 2), np.uint8), labels, None, None), data_cli.ANIMAL_CLASSES)
    monkeypatch.setitem(data_cli.DATASETS, "animal-mnist", fake)
    with pytest.raises(ConfigError) as refused:
        data_cli.write_dataset("animal-mnist", str(tmp_path / "am"), limit=3)
    assert str(refused.value) == (
        "--limit 3 leaves 10 of the 10 classes without a training image: pass --limit 6 or more."
    )
    assert list(tmp_path.iterdir()) == []


def test_data_command_writes_fashion_mnist_image_folder(tmp_path):
    from solo_diet.cli.data import FASHION_DIRS, load_fashion_mnist

    if not any(Path(d).is_dir() for d in FASHION_DIRS):
        pytest.skip("apt-get install dataset-fashion-mnist")
    x_train, y_train, x_val, y_val = load_fashion_mnist()
    assert x_train.shape == (60000, 28, 28) and x_val.shape == (10000, 28, 28)
    assert (torch.bincount(torch.from_numpy(y_train)) == 6000).all()
    assert main(["data", "fashion-mnist", str(tmp_path / "fm"), "--limit", "100"]) == 0
    assert sum(len(list(p.iterdir())) for p in (tmp_path / "fm" / "train").iterdir()) == 100
