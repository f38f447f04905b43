"""``solo-diet compare`` end to end on a tiny ImageFolder: report, metrics, resume, spec errors."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.cli.main import main
from solo_diet.compare import run_compare
from solo_diet.core.errors import ConfigError
from solo_diet.core.metrics.logreg import L2_GRID
from solo_diet.launch.callbacks import read_epoch_rows
from tests._helpers.compare import (
    SHIPPED_SPEC,
    interrupt_after_first_epoch,
    write_tiny_images,
)
from tests._helpers.compare import four_methods_overrides as tiny_overrides
from tests._helpers.compare import tiny_overrides as shrunk

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


def results_by_run(output_dir: Path) -> dict[str, dict[str, str]]:
    with (output_dir / "results.csv").open() as f:
        return {row["run"]: row for row in csv.DictReader(f)}


def test_compare_end_to_end_then_resumes_only_the_interrupted_run(data_root, tmp_path, capsys):
    out = tmp_path / "cmp"
    report = run_compare(SHIPPED_SPEC, tiny_overrides(data_root, out))

    assert report == out / "report.md" and "| diet | diet |" in report.read_text()
    assert not (out / "references").exists()  # reference_rows=[] turns them off
    for plot in ("spectra.png", "curves.png"):
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"
    results = results_by_run(out)
    assert list(results) == ["diet", "simclr", "simclr_sem", "cplearn"]
    for name, row in results.items():
        assert int(row["epochs"]) == 2
        assert 0.0 <= float(row["linear_acc1"]) <= 100.0 and 0.0 <= float(row["knn_acc1"]) <= 100.0
        assert 0.0 <= float(row["logreg_acc1"]) <= 100.0 and float(row["logreg_l2"]) in L2_GRID
        assert 1.0 <= float(row["rankme"]) <= 8.0 + 1e-3  # width-8 backbone
        assert (
            1.0 <= float(row["lidar"]) <= 5.0 + 1e-3
        )  # min(d, n - 1) with n = 6 surrogate classes
        assert float(row["samples_per_s"]) > 0 and math.isnan(float(row["peak_gpu_mib"]))
        assert 0 < float(row["evaluation_wall_s"]) < float(row["pretrain_wall_s"]) + 600
        assert (row["sem_rankme"] != "" and row["sem_linear_acc1"] != "") == (name == "simclr_sem")
        assert 0.0 <= float(row["kmeans_nmi"]) <= 1.0 and -1.0 <= float(row["kmeans_ari"]) <= 1.0
        assert (
            0.2 - 1e-6 <= float(row["kmeans_acc"]) <= 1.0
        )  # 5 classes of 3 val images, 5 clusters
        assert (row["codes_nmi"] != "") == (name == "cplearn")
        assert (row["embedding_rankme"] != "") == (name == "cplearn")
    assert 0.0 <= float(results["simclr_sem"]["sem_linear_acc1"]) <= 100.0
    assert (
        1 <= float(results["cplearn"]["codes_used"]) <= 15
        and 0.0 <= float(results["cplearn"]["codes_nmi"]) <= 1.0
    )
    embedding = {k: float(results["cplearn"][f"embedding_{k}"]) for k in ("rankme", "lidar")}
    assert 1.0 <= embedding["rankme"] <= 15.0 + 1e-3  # 15 val images, h 2048 wide
    assert 1.0 <= embedding["lidar"] <= 5.0 + 1e-3
    assert 0.0 <= float(results["cplearn"]["embedding_knn_acc1"]) <= 100.0
    assert "kmeans_nmi" in report.read_text() and "sem_linear_acc1" in report.read_text()
    assert "- `logreg_acc1`: converged logistic-regression probe on frozen features" in (
        report.read_text()
    )
    assert 1.0 <= float(results["simclr_sem"]["sem_lidar"]) <= 5.0 + 1e-3
    rows = read_epoch_rows(out / "runs" / "diet" / "epochs.csv")
    assert [r["epoch"] for r in rows] == [0.0, 1.0] and all(r["samples"] == 8 for r in rows)
    assert all(1.0 <= r["val_rankme"] <= 8.0 + 1e-3 and 0.0 <= r["val_acc1"] <= 100.0 for r in rows)

    diet_result = out / "runs" / "diet" / "result.json"
    sweep = json.loads(diet_result.read_text())["logreg_sweep"]  # every strength's held-out fit
    assert sweep["l2"] == list(L2_GRID) and len(sweep["heldout_acc1"]) == len(L2_GRID)
    edge = results["diet"]["logreg_l2_edge"]
    assert edge == str(float(results["diet"]["logreg_l2"]) in (L2_GRID[0], L2_GRID[-1]))
    diet_before = (
        diet_result.stat().st_mtime_ns,
        (out / "runs" / "diet" / "epochs.csv").read_text(),
    )
    simclr_dir = out / "runs" / "simclr"
    interrupt_after_first_epoch(simclr_dir)
    sem_dir = out / "runs" / "simclr_sem"  # copied from a machine that lost it mid-run: starts over
    for checkpoint in sem_dir.rglob("*.ckpt"):
        checkpoint.unlink()
    (sem_dir / "result.json").unlink()
    lost_attempt = {**json.loads((sem_dir / "state.json").read_text()), "pretrain_wall_s": 1e6}
    del lost_attempt["checkpoint"]
    (sem_dir / "state.json").write_text(json.dumps(lost_attempt))
    for checkpoint in (out / "runs" / "diet").rglob("*.ckpt"):  # copied back without checkpoints
        checkpoint.unlink()
    capsys.readouterr()

    run_compare(SHIPPED_SPEC, tiny_overrides(data_root, out))

    log = capsys.readouterr().out
    assert "run 'diet': already evaluated (its checkpoint is gone; the result stands)" in log
    assert not list((out / "runs" / "diet").rglob("*.ckpt"))  # nothing was trained again
    assert "run 'cplearn': already evaluated\n" in log  # with its checkpoint: not even loaded
    assert "run 'cplearn': pretraining already finished" not in log
    assert "run 'simclr': resuming after epoch 0" in log
    assert (
        diet_result.stat().st_mtime_ns,
        (out / "runs" / "diet" / "epochs.csv").read_text(),
    ) == diet_before
    with (simclr_dir / "epochs.csv").open() as f:
        written_epochs = [int(row["epoch"]) for row in csv.DictReader(f)]
    assert written_epochs == [0, 1]  # epoch 0 was not trained again; epoch 1 was, logged once
    assert "run 'simclr_sem': resuming" not in log
    with (sem_dir / "epochs.csv").open() as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1]
    assert json.loads((sem_dir / "result.json").read_text())["pretrain_wall_s"] < 1e5
    assert json.loads((simclr_dir / "result.json").read_text())["checkpoint"].endswith("-ep=1.ckpt")
    assert list(results_by_run(out)) == ["diet", "simclr", "simclr_sem", "cplearn"]


def test_a_job_of_another_spec_with_the_same_recipe_keeps_its_result(data_root, tmp_path, capsys):
    """Run folders copied from another spec's output_dir (checkpoints left behind) stand where the
    run's name, recipe, seed, evaluation and data match, as the SEM-twins spec reuses the small-data
    spec's baselines; the other runs train."""
    first, second = tmp_path / "first", tmp_path / "second"
    diet = "{name: diet, config_name: diet}"
    run_compare(SHIPPED_SPEC, tiny_overrides(data_root, first) + [f"runs=[{diet}]"])
    shutil.copytree(first / "runs" / "diet", second / "runs" / "diet")
    for checkpoint in tmp_path.rglob("*.ckpt"):
        checkpoint.unlink()
    capsys.readouterr()

    runs = f"runs=[{diet}, {{name: simclr, config_name: simclr}}]"
    run_compare(SHIPPED_SPEC, tiny_overrides(data_root, second) + ["name=another-spec", runs])

    log = capsys.readouterr().out
    assert "run 'diet': already evaluated (its checkpoint is gone; the result stands)" in log
    assert not list((second / "runs" / "diet").rglob("*.ckpt"))  # nothing was trained again
    assert list((second / "runs" / "simclr").rglob("*.ckpt"))
    reused, original = results_by_run(second)["diet"], results_by_run(first)["diet"]
    assert reused["linear_acc1"] == original["linear_acc1"] != ""


def test_evaluation_fingerprint_follows_config_content_not_location(data_root, tmp_path):
    import shutil

    import solo_diet
    from solo_diet.compare.plan.jobs import evaluation_fingerprint
    from solo_diet.compare.spec.load import load_spec

    solo_diet.register()
    copies = []
    for name in ("here", "there"):
        folder = tmp_path / name
        shutil.copytree(SHIPPED_SPEC.parent / "configs", folder / "configs")
        shutil.copy(SHIPPED_SPEC, folder / SHIPPED_SPEC.name)
        copies.append(folder)

    def fingerprint_of(folder: Path, *extra: str) -> str:
        spec = load_spec(folder / SHIPPED_SPEC.name, [*shrunk(data_root, folder / "out"), *extra])
        return evaluation_fingerprint(spec)

    here = fingerprint_of(copies[0])
    assert fingerprint_of(copies[1]) == here  # another checkout, another output_dir
    assert fingerprint_of(copies[0], "evaluation.lidar_views=5") != here  # the count alone
    views = copies[1] / "configs" / "augmentations" / "one_view.yaml"
    views.write_text(views.read_text().replace("crop_size: 32", "crop_size: 24"))
    changed_views = fingerprint_of(copies[1])
    assert changed_views != here
    probe = copies[1] / "configs" / "linear.yaml"
    probe.write_text(probe.read_text().replace("lr: ", "lr: 0.5 #"))
    assert fingerprint_of(copies[1]) not in (here, changed_views)


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["runs=[{name: bad, config_name: simclr, overrides: [method=no_such_method]}]"],
            "unknown method 'no_such_method'",
        ),
        (
            ["runs=[{name: bad, config_name: simclr, overrides: [max_epochs=7]}]"],
            "conflicting budgets",
        ),
        (
            ["runs=[{name: bad, config_name: simclr, overrides: [optimizer.batch_size=64]}]"],
            "conflicting budgets",
        ),
        (["budget.max_epochs=0"], "budget.max_epochs"),
        (["runs=[{name: a, config_name: diet}, {name: a, config_name: simclr}]"], "must be unique"),
        (["runs=[{name: a, config_name: no_such_config}]"], "no_such_config"),
        (["evaluation.no_such_key=1"], "no_such_key"),
        (["evaluation.knn_kk=1"], r"`evaluation` keys: \[.*'knn_k', 'knn_temperature'"),
        (["evaluation.rankme_samples=1"], "`evaluation.rankme_samples` must be"),
        (["evaluation.seed=-1"], "`evaluation.seed` must be"),
        (
            ["trainer=[accelerator=cpu,precision=32,devices=auto]"],
            r"`devices` must be a positive count or a list of device ids, got 'auto'",
        ),
        (
            ["budget.epochs=1"],
            r"`budget` keys: \['batch_size', 'checkpoint_every_n_epochs', 'limit_train_batches'",
        ),
        (
            ["parallel.worker=2"],
            r"`parallel` keys: \['jobs_per_gpu', 'mps', 'reuse_workers', 'workers'\]",
        ),
        (["parallel.workers=0"], r"`parallel.workers` must be a positive integer, got 0\. Or null"),
        (["parallel.jobs_per_gpu=0"], "`parallel.jobs_per_gpu` must be a positive integer"),
        (["parallel.mps=always"], r"`parallel.mps` must be one of \['auto', 'on', 'off'\]"),
        (
            ["budget.val_every_n_epochs=-2"],
            "`budget.val_every_n_epochs` must be a positive integer",
        ),
        (["seeds=[0,0]"], "`seeds` must be a list of distinct non-negative integers"),
        (["seeds=3"], "`seeds` must be a list"),
        (
            ["reference_rows=[pixels]"],
            r"`reference_rows` must be a list of \['random_init', 'raw_pixels'\]",
        ),
        (
            ["seeds=[0,1]", "runs=[{name: a, config_name: diet, overrides: [seed=3]}]"],
            "overrides `seed`",
        ),
        (
            ["reference_rows=[raw_pixels]", "runs=[{name: raw_pixels, config_name: diet}]"],
            "name of a reference row",
        ),
        (
            ["only=[diett]"],
            r"`only` must be null \(every job\) or .* names \['diet', 'simclr'.*got \['diett'\]"
            r"; did you mean `diet` for `diett`\?",
        ),
        (["only=[]"], "`only` must be null"),
        (["data.format=gpuu"], r"`data.format` must be one of \['auto', 'gpu', 'image_folder'\]"),
        (["pretrain_overrides=[no_such_key=1]"], "run 'diet': `no_such_key` is not a key of"),
        (["trainer.accelerator=cpu"], r"lists, set whole: .*'trainer=\[accelerator=cpu"),
        (["linear.overrides=[no_such_key=1]"], "`linear`: `no_such_key` is not a key of the"),
        (
            ["runs=[{name: bad, config_name: simclr, overrides: [optimizer.name=lars2]}]"],
            "run 'bad': `optimizer.name` must be one of .*, got 'lars2'; did you mean 'lars'",
        ),
        (
            ["runs=[{name: bad, config_name: simclr, overrides: [++optimizer.weight_decy=0]}]"],
            "run 'bad': `optimizer.weight_decy` is not a key .* did you mean `optimizer.weight_",
        ),
        (
            ["linear.overrides=[optimizer.name=sgdd]"],
            "`linear`: `optimizer.name` must be one of .*, got 'sgdd'; did you mean 'sgd'",
        ),
        (
            ["linear.overrides=[++optimizer.kwargs.weight_decay=0]"],
            r"`linear`: `optimizer.kwargs.weight_decay`: solo-learn passes .* `optimizer.weight",
        ),
    ],
)
def test_bad_specs_fail_before_training_with_a_clear_message(data_root, tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        run_compare(SHIPPED_SPEC, tiny_overrides(data_root, tmp_path / "out") + extra)
    assert not (tmp_path / "out" / "runs").exists()


def test_cli_reports_a_missing_dataset(tmp_path, capsys):
    code = main(
        [
            "compare",
            str(SHIPPED_SPEC),
            f"data.root={tmp_path / 'nowhere'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    error = capsys.readouterr().err
    assert code == 2
    assert "dataset missing" in error and "solo-diet data animal-mnist" in error
