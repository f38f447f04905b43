"""``solo-diet configs DIR``: the shipped YAMLs (package data) copied out, and launched from."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from solo_diet.cli.main import DATASET_CHOICES, SHIPPED, main
from tests._helpers import requires_solo

ROOT = Path(__file__).resolve().parents[2]


def yaml_files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*.yaml"))


def test_checkout_paths_reach_the_package_configs():
    assert (ROOT / "scripts" / "pretrain").resolve() == SHIPPED / "pretrain"
    assert (ROOT / "scripts" / "linear").resolve() == SHIPPED / "linear"
    assert (
        ROOT / "benchmarks" / "compare" / "configs"
    ).resolve() == SHIPPED / "compare" / "configs"
    for dataset in DATASET_CHOICES:
        assert (ROOT / "scripts" / "pretrain" / dataset / "diet.yaml").is_file()


def test_writes_every_shipped_config(tmp_path, capsys):
    assert main(["configs", str(tmp_path)]) == 0
    for stage in ("pretrain", "linear", "compare"):
        shipped = yaml_files(SHIPPED / stage)
        assert yaml_files(tmp_path / stage) == shipped and shipped
        assert all(
            filecmp.cmp(SHIPPED / stage / f, tmp_path / stage / f, shallow=False) for f in shipped
        )
    assert not (tmp_path / "demo").exists()
    assert f"wrote {tmp_path / 'compare'}" in capsys.readouterr().out


def test_one_dataset_and_refusing_to_overwrite_edits(tmp_path, capsys):
    assert main(["configs", str(tmp_path), "--dataset", "imagenet-100"]) == 0
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["imagenet-100"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linear", "pretrain"]
    edited = tmp_path / "pretrain" / "imagenet-100" / "diet.yaml"
    edited.write_text(edited.read_text() + "max_epochs: 5\n")
    capsys.readouterr()
    assert main(["configs", str(tmp_path), "--dataset", "imagenet-100"]) == 2
    assert (
        "differ from the shipped ones" in capsys.readouterr().err
        and "max_epochs: 5" in edited.read_text()
    )
    assert main(["configs", str(tmp_path), "--dataset", "imagenet-100", "--force"]) == 0
    assert filecmp.cmp(edited, SHIPPED / "pretrain" / "imagenet-100" / "diet.yaml", shallow=False)


CPU = [
    "accelerator=cpu",
    "devices=1",
    "precision=32",
    "data.num_workers=0",
    "wandb.enabled=False",
    "++limit_val_batches=1",
    "++num_sanity_val_steps=0",
    "++enable_progress_bar=False",
    "optimizer.batch_size=4",
]


@pytest.mark.solo
@requires_solo()
def test_written_configs_launch(tmp_path, capsys):
    """pretrain -> linear from the copied custom configs, and the copied comparison spec."""
    from tests._helpers.synthetic import write_image_folder

    data = tmp_path / "data"
    write_image_folder(data / "train", num_classes=5, per_class=6, seed=0)
    write_image_folder(data / "val", num_classes=5, per_class=3, seed=1)
    configs = tmp_path / "configs"
    assert main(["configs", str(configs), "--dataset", "custom"]) == 0
    paths = [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        f"checkpoint.dir={tmp_path / 'runs'}",
    ]

    pretrain = [
        "pretrain",
        "--config-path",
        str(configs / "pretrain" / "custom"),
        "--config-name",
        "diet.yaml",
    ]
    tiny = [
        "max_epochs=1",
        "++limit_train_batches=2",
        "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8",
        "augmentations.0.crop_size=32",
    ]
    capsys.readouterr()
    assert main(pretrain + paths + CPU + tiny) == 0
    ckpt = capsys.readouterr().out.strip().splitlines()[-1].removeprefix("last checkpoint: ")
    linear = [
        "linear",
        "--config-path",
        str(configs / "linear" / "custom"),
        "--config-name",
        "diet.yaml",
    ]
    probe = [
        "max_epochs=1",
        "++limit_train_batches=2",
        f"pretrained_feature_extractor='{ckpt}'",
        "data.augmentations.crop_size=32",
    ]
    assert main(linear + paths + CPU + probe) == 0
    assert "linear probe top-1" in capsys.readouterr().out

    spec = configs / "compare" / "animal_mnist.yaml"
    budget = [
        f"data.root={data}",
        f"output_dir={tmp_path / 'cmp'}",
        "budget.max_epochs=1",
        "budget.batch_size=4",
        "budget.limit_train_batches=2",
        "trainer=[accelerator=cpu,precision=32,data.num_workers=0]",
        "pretrain_overrides=[backbone.kwargs.width=8]",
        "linear.overrides=[max_epochs=1,optimizer.batch_size=8]",
        "evaluation.lidar_samples=6",
        "evaluation.lidar_views=3",
        "evaluation.batch_size=8",
        "runs=[{name: diet, config_name: diet}]",
    ]
    assert main(["compare", str(spec)] + budget) == 0
    assert "| diet | diet |" in (tmp_path / "cmp" / "report.md").read_text()


@pytest.mark.slow  # over 2 s
@requires_solo()
def test_no_shipped_or_solo_learn_yaml_trips_the_key_typo_check():
    """Every launch YAML of solo-learn's checkout and of ours composes and passes the near-miss key
    check (top level and solo-learn's sections), so the check refuses typos, not real keys."""
    import solo

    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.launch_checks import check_key_typos

    solo_scripts = Path(solo.__file__).resolve().parents[1] / "scripts"
    if not solo_scripts.is_dir():
        pytest.skip(f"solo-learn is installed without its scripts/ ({solo_scripts})")
    folders = [solo_scripts / "pretrain", solo_scripts / "linear", SHIPPED / "pretrain"]
    recipes = ROOT / "benchmarks" / "compare"  # its YAMLs at the top are compare specs
    folders += [SHIPPED / "linear", recipes / "configs", recipes / "resnet18"]
    launch_yamls = [
        path
        for folder in folders
        for path in sorted(folder.rglob("*.yaml"))
        if not {"augmentations", "wandb"} & set(path.parts) and "name:" in path.read_text()
    ]
    assert len(launch_yamls) > 100
    for path in launch_yamls:
        check_key_typos(compose_cfg(str(path.parent), path.name, []))
