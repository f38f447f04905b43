"""What a new user hits first, through the real command line and solo-learn: a did-you-mean for a
mistyped method or compare spec key, solo-learn's main_pretrain.py refused for our methods, a
missing config named as typed, and a linear probe whose training set is smaller than one batch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests._helpers import requires_solo
from tests._helpers.cli import cli
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = [pytest.mark.solo, requires_solo()]

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = ROOT / "scripts" / "pretrain" / "custom"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("data"))


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def data_overrides(data: Path, out: Path) -> list[str]:
    return [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        f"checkpoint.dir={out}",
        "wandb.enabled=False",
        "accelerator=cpu",
    ]


def test_a_mistyped_method_gets_the_closest_names_not_all_of_them(data, tmp_path, capsys):
    argv = ["pretrain", "--config-path", str(CUSTOM), "--config-name", "diet", "method=dieet"]
    code, _, err = cli(argv + data_overrides(data, tmp_path), capsys)
    line = one_line(err)
    assert code == 2
    assert "unknown `method: dieet`; did you mean `diet`" in line
    assert "`solo-diet methods` lists every registered method" in line and "all4one" not in line


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "budgett.max_epochs=2",
            "`budgett` is not a spec key; did you mean `budget`? Spec keys: [",
        ),
        (
            "evaluation.knn_kk=3",
            "`evaluation.knn_kk` is not a key of `evaluation`; did you mean `evaluation.knn_k`?",
        ),
    ],
)
def test_an_unknown_spec_key_names_the_key_its_match_and_the_valid_keys(override, expected, capsys):
    code, _, err = cli(["compare", str(SHIPPED_SPEC), override], capsys)
    line = one_line(err)
    assert code == 2 and expected in line and str(SHIPPED_SPEC) in line
    assert "not in struct" not in line


def test_an_unknown_key_in_the_spec_file_names_the_file(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SHIPPED_SPEC.read_text() + "budgett: {max_epochs: 2}\n")
    code, _, err = cli(["compare", str(spec)], capsys)
    line = one_line(err)
    assert code == 2 and line.startswith(f"solo-diet compare: {spec}: `budgett` is not a spec key")


def test_solo_learns_main_pretrain_with_our_method_points_at_our_launcher(data, tmp_path, capsys):
    import solo

    script = Path(solo.__file__).resolve().parents[1] / "main_pretrain.py"
    if not script.is_file():
        pytest.skip(f"solo-learn is installed without its scripts ({script})")
    argv = ["solo-script", str(script), "--config-path", str(CUSTOM), "--config-name", "diet"]
    code, _, err = cli(argv + data_overrides(data, tmp_path), capsys)
    line = one_line(err)
    assert code == 2
    assert "`method: diet` is a solo-diet method" in line and "main_pretrain.py" in line
    assert "use `solo-diet pretrain`" in line


@pytest.mark.parametrize("name", ["main_knn.py", "main_umap.py"])
def test_a_cuda_only_solo_script_on_a_cpu_is_one_line(capsys, name):
    import solo
    import torch

    script = Path(solo.__file__).resolve().parents[1] / name
    if not script.is_file() or torch.cuda.is_available():
        pytest.skip(f"needs solo-learn's {name} and a machine without CUDA")
    code, _, err = cli(["solo-script", str(script), "--config-path", str(CUSTOM)], capsys)
    assert code == 2 and one_line(err).startswith(
        f"solo-diet solo-script: solo-learn's {name} puts its tensors on CUDA, and torch sees no "
        "CUDA device here"
    )


def test_solo_script_help_says_which_scripts_it_is_for(capsys):
    from solo_diet.cli.main import main

    with pytest.raises(SystemExit):
        main(["solo-script", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "main_knn.py and main_umap.py" in out and "`solo-diet pretrain`" in out


def test_a_missing_config_names_the_folder_as_typed(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # scripts/pretrain/custom links into solo_diet/configs
    argv = ["pretrain", "--config-path", "scripts/pretrain/custom", "--config-name", "dite"]
    code, _, err = cli(argv, capsys)
    line = one_line(err)
    assert code == 2
    assert "no dite.yaml in scripts/pretrain/custom; it holds [" in line
    assert "Did you mean 'diet'?" in line and "solo_diet/configs" not in line


@pytest.mark.parametrize("data_format", ["image_folder", "gpu"])
def test_a_probe_on_fewer_images_than_its_batch_fits_the_batch_and_says_so(
    data_format, data, tmp_path, capsys
):
    from solo_diet.launch.checkpointing import save_raw_pixels

    ckpt = save_raw_pixels(tmp_path / "pixels" / "pixels.ckpt", (3, 32, 32), "custom")
    argv = ["linear", "--config-path", str(ROOT / "scripts" / "linear" / "custom")]
    argv += ["--config-name", "diet", f"pretrained_feature_extractor={ckpt}", "max_epochs=1"]
    argv += ["optimizer.batch_size=256", "data.num_workers=0", "data.augmentations.crop_size=32"]
    argv += ["precision=32", "++enable_progress_bar=False", "scheduler.lr_decay_steps=[1]"]
    argv += [f"data.format={data_format}"]
    code, out, err = cli(argv + data_overrides(data, tmp_path), capsys)
    assert code == 0, err
    assert (
        "the training set has 30 images, fewer than one batch (optimizer.batch_size=256, "
        "incomplete batches dropped): the probe trains at optimizer.batch_size=30" in out
    )
    accuracy = float(out.strip().splitlines()[-1].rpartition(": ")[2].rstrip("%"))
    assert math.isfinite(accuracy)


def test_compare_reports_the_fitted_probe_batch_and_its_progress(data, tmp_path, capsys):
    out_dir = tmp_path / "cmp"
    overrides = tiny_overrides(data, out_dir) + [
        "linear.overrides=[max_epochs=1,optimizer.batch_size=256]",
        "reference_rows=[raw_pixels]",
        "only=[raw_pixels]",
    ]
    code, out, err = cli(["compare", str(SHIPPED_SPEC), *overrides], capsys)
    assert code == 0, err
    assert "[compare] step 1 of 1: reference 'raw_pixels'; 0:0" in out
    result = json.loads(next(out_dir.rglob("result.json")).read_text())
    assert math.isfinite(result["linear_acc1"])
    assert result["linear_fitted_batch"]["batch_size"] == 30
    report = (out_dir / "report.md").read_text()
    assert "The training set has 30 images, fewer than one probe batch of 256" in report


def test_demo_progress_says_each_pretraining_epoch_and_skips_a_finished_fit(data, tmp_path):
    from solo_diet.launch.callbacks import OverallProgress
    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.pretrain import run_pretrain
    from tests._helpers.cli import overrides

    said: list[str] = []
    cfg_overrides = overrides(data, tmp_path, epochs=2)
    for _ in range(2):  # the second time the fit is finished: nothing trains
        progress = OverallProgress("demo", [1, 2], say=said.append)
        callback = progress.epoch_callback(2, "pretraining diet")
        run_pretrain(compose_cfg(str(CUSTOM), "diet", cfg_overrides), extra_callbacks=[callback])
    assert [line.partition(";")[0] for line in said] == [
        "[demo] step 2 of 2: pretraining diet, epoch 1/2",
        "[demo] step 2 of 2: pretraining diet, epoch 2/2",
    ]
    assert said[0].endswith(" left") and not callback.started
