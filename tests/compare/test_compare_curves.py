"""``solo-diet compare``'s learning curves on a tiny ImageFolder: snapshots at the curve's epochs,
``curve.csv`` per job, the report's figure and tables, and reruns that evaluate only what is
missing."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import load_spec, run_compare
from solo_diet.compare.evaluate.curves import (
    curve_epochs,
    evaluate_curve,
    read_points,
    snapshot_epochs,
    write_points,
)
from solo_diet.compare.plan.budgets import samples_seen, views_per_sample
from solo_diet.compare.plan.jobs import plan_jobs
from solo_diet.compare.report.curves import run_curves
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import (
    SHIPPED_SPEC,
    interrupt_after_first_epoch,
    tiny_overrides,
    write_tiny_images,
)

pytestmark = pytest.mark.solo

IMAGES_PER_EPOCH = 8  # budget.limit_train_batches=2 batches of budget.batch_size=4
SIMCLR_VIEWS = 2


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


def curve_overrides(data_root: Path, output_dir: Path) -> list[str]:
    """3 epochs, a point after each (two snapshots and the final checkpoint), SimCLR (2 views) at 2
    seeds, no reference rows; the tiny spec keeps every pretraining checkpoint."""
    return tiny_overrides(data_root, output_dir) + [
        "budget.max_epochs=3",
        "curves.points=3",
        "seeds=[0,1]",
        "reference_rows=[]",
        "evaluation.clustering=false",
        "runs=[{name: simclr, config_name: simclr}]",
    ]


def curve_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ": learning curve at epoch" in line]


def backbone_of(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("backbone.")}


def test_curve_epochs_are_evenly_spaced_and_end_at_the_budget():
    assert curve_epochs(10, 300) == list(range(30, 301, 30))
    assert curve_epochs(3, 10) == [4, 7, 10]
    assert curve_epochs(5, 5) == [1, 2, 3, 4, 5]
    assert curve_epochs(0, 5) == []
    assert curve_epochs(10, 2) == [1, 2]  # at most one point per epoch


# a spec of 6 epochs whose runs train 2 (their own max_epochs), 4 (32 samples of 8 images x 1 view)
# and the spec's 6
OWN_BUDGETS = (
    "runs=[{name: short, config_name: diet, budget: {max_epochs: 2}},"
    " {name: by_samples, config_name: diet, budget: {samples: 32}},"
    " {name: full, config_name: diet}]"
)
OWN_EPOCHS = {"short": 2, "by_samples": 4, "full": 6}


def test_each_runs_curve_follows_its_own_budget_and_ends_at_its_last_epoch(data_root, tmp_path):
    """Snapshots spread over each run's own epochs; the final point at its own last epoch and
    sample count, rows past it (a curve made before curves followed the run's budget) dropped; the
    gathered learning curves stop at each run's budget."""
    extra = ["budget.max_epochs=6", "curves.points=3", "seeds=[0]", "reference_rows=[]"]
    spec = load_spec(SHIPPED_SPEC, tiny_overrides(data_root, tmp_path) + extra + [OWN_BUDGETS])
    jobs = [job for job in plan_jobs(spec) if job.reference is None]
    assert {job.name: snapshot_epochs(spec, job) for job in jobs} == {
        "short": [1],
        "by_samples": [2, 3],
        "full": [2, 4],
    }
    results = []
    for job in jobs:
        epochs = OWN_EPOCHS[job.name]
        job.run_dir.mkdir(parents=True)
        (job.run_dir / "epochs.csv").write_text(
            "epoch,samples\n" + "".join(f"{e},{IMAGES_PER_EPOCH}\n" for e in range(epochs))
        )
        stale = {"linear_acc1": 1.0, "knn_acc1": 1.0, "source": "final", "wall_s": 0.0}
        write_points(job.run_dir, {6: {"epoch": 6, "samples_seen": 48.0, **stale}})
        result = {"run": job.name, "seed": 0, "job": job.key, "fingerprint": "now"}
        result.update(linear_acc1=50.0, knn_acc1=60.0, logreg_acc1=55.0)
        evaluate_curve(spec, job, None, result)  # no snapshot saved: only the final point
        points = read_points(job.run_dir)
        assert list(points) == [epochs]
        assert points[epochs]["samples_seen"] == IMAGES_PER_EPOCH * epochs  # DIET: one view
        final = points[epochs]
        assert (final["source"], final["linear_acc1"]) == ("final", 50.0)
        assert final["logreg_acc1"] == 55.0
        results.append(result)

    curves = run_curves(results, tmp_path)
    assert {run: [row["epoch"] for row in rows] for run, rows in curves.items()} == {
        run: [epochs] for run, epochs in OWN_EPOCHS.items()
    }


@pytest.mark.parametrize("points", ["-1", "true", "2.5", "ten"])
def test_bad_points_name_the_key(data_root, tmp_path, points):
    overrides = tiny_overrides(data_root, tmp_path / "out") + [f"curves.points={points}"]
    with pytest.raises(ConfigError, match=r"`curves.points` must be a non-negative integer"):
        load_spec(SHIPPED_SPEC, overrides)


def test_views_per_sample_count_every_crop_of_the_runs_pipelines(data_root, tmp_path):
    runs = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
    spec = load_spec(SHIPPED_SPEC, tiny_overrides(data_root, tmp_path) + [runs])
    jobs = plan_jobs(spec)
    assert {job.name: views_per_sample(job.cfg) for job in jobs if job.reference is None} == {
        "diet": 1,
        "simclr": SIMCLR_VIEWS,
    }
    assert samples_seen(3 * IMAGES_PER_EPOCH, SIMCLR_VIEWS) == 48


def test_seeds_spread_is_mean_std_min_and_max_of_the_points_of_the_results_settings(tmp_path):
    rows = {0: [50.0, 60.0], 1: [54.0, 70.0]}  # seed: linear at epochs 1 and 2
    results = []
    for seed, values in rows.items():
        job = f"runs/diet/seed_{seed}"
        (tmp_path / job).mkdir(parents=True)
        points = {
            e + 1: {
                "epoch": e + 1,
                "linear_acc1": v,
                "knn_acc1": 2 * v,
                "samples_seen": 8.0 * (e + 1),
                "source": "snapshot",
                "wall_s": 1.0,
                "fingerprint": "now",
            }
            for e, v in enumerate(values)
        }
        points[3] = {**points[2], "epoch": 3, "linear_acc1": 99.0, "fingerprint": "before"}
        write_points(tmp_path / job, points)
        results.append({"run": "diet", "seed": seed, "job": job, "fingerprint": "now"})

    (curve,) = run_curves(results, tmp_path).values()
    assert [row["epoch"] for row in curve] == [1, 2]  # epoch 3's rows are of other settings
    first, second = curve
    assert (first["linear_acc1"], first["linear_acc1_min"], first["linear_acc1_max"]) == (
        52,
        50,
        54,
    )
    assert first["linear_acc1_std"] == pytest.approx(math.sqrt(8))  # ddof 1
    assert (second["knn_acc1"], second["n_seeds"], second["samples_seen"]) == (130, 2, 16)


def test_a_curve_file_without_the_logistic_regression_column_still_loads(tmp_path):
    """A ``curve.csv`` written before ``logreg_acc1``: the column reads as NaN and the learning
    curves gather it as missing."""
    job = tmp_path / "runs/diet/seed_0"
    job.mkdir(parents=True)
    (job / "curve.csv").write_text(
        "epoch,samples_seen,linear_acc1,knn_acc1,source,wall_s,fingerprint\n"
        "1,8,40.0,45.0,snapshot,1.0,now\n2,16,50.0,55.0,final,0.0,now\n"
    )
    points = read_points(job)
    assert math.isnan(points[1]["logreg_acc1"]) and points[2]["linear_acc1"] == 50.0
    result = {"run": "diet", "seed": 0, "job": "runs/diet/seed_0", "fingerprint": "now"}
    (curve,) = run_curves([result], tmp_path).values()
    assert [row["linear_acc1"] for row in curve] == [40.0, 50.0]
    assert all(math.isnan(row["logreg_acc1"]) for row in curve)
    write_points(job, points)  # rewritten with the new column, NaN where unknown
    assert "logreg_acc1" in (job / "curve.csv").read_text().splitlines()[0]
    assert math.isnan(read_points(job)[1]["logreg_acc1"])


@pytest.mark.slow
def test_learning_curves_end_to_end_and_reruns_evaluate_only_missing_points(
    data_root, tmp_path, capsys
):
    out = tmp_path / "cmp"
    report = run_compare(SHIPPED_SPEC, curve_overrides(data_root, out)).read_text()

    assert len(curve_lines(capsys.readouterr().out)) == 4  # 2 jobs x 2 snapshots
    for seed in (0, 1):
        folder = out / "runs" / "simclr" / f"seed_{seed}"
        points = read_points(folder)
        assert sorted(points) == [1, 2, 3]
        assert [points[e]["source"] for e in (1, 2, 3)] == ["snapshot", "snapshot", "final"]
        for epoch, point in points.items():
            assert point["samples_seen"] == IMAGES_PER_EPOCH * epoch * SIMCLR_VIEWS
            assert 0.0 <= point["linear_acc1"] <= 100.0 and 0.0 <= point["knn_acc1"] <= 100.0
        result = json.loads((folder / "result.json").read_text())
        assert (points[3]["linear_acc1"], points[3]["knn_acc1"]) == (
            result["linear_acc1"],
            result["knn_acc1"],
        )
        # each snapshot holds the backbone after its epoch: solo-learn's checkpoint of that
        # epoch (kept by the tiny spec's keep_prev, named by the 0-based epoch) to the bit
        assert sorted(p.name for p in (folder / "curves").glob("*.ckpt")) == [
            "epoch_1.ckpt",
            "epoch_2.ckpt",
        ]
        for epoch in (1, 2):
            (solo_learn,) = folder.glob(f"pretrain/**/*-ep={epoch - 1}.ckpt")
            snapshot, saved = (
                backbone_of(p) for p in (folder / f"curves/epoch_{epoch}.ckpt", solo_learn)
            )
            assert snapshot.keys() == saved.keys()
            assert all(torch.equal(snapshot[k], saved[k]) for k in saved)
        assert not all(
            torch.equal(a, b)
            for a, b in zip(
                backbone_of(folder / "curves/epoch_1.ckpt").values(),
                backbone_of(Path(result["checkpoint"])).values(),
            )
        )

    with (out / "learning_curves.csv").open() as f:
        gathered = list(csv.DictReader(f))
    assert [(r["run"], int(r["epoch"]), int(r["n_seeds"])) for r in gathered] == [
        ("simclr", epoch, 2) for epoch in (1, 2, 3)
    ]
    for row in gathered:
        for metric in ("linear_acc1", "logreg_acc1", "knn_acc1"):
            low, mean, high = (float(row[f"{metric}{s}"]) for s in ("_min", "", "_max"))
            assert low <= mean <= high
    assert (out / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Learning curves" in report and "](learning_curves.png)" in report
    assert report.count("| run | 1 | 2 | 3 |") == 3  # the two probes' and the kNN table
    assert "- `simclr` (2 seeds): linear probe " in report

    # rerun: one job lost a point's row, the other was interrupted after its first epoch (its
    # later checkpoints gone): only the lost row and the retrained epoch's point are evaluated
    lost_row, interrupted = (out / "runs" / "simclr" / f"seed_{seed}" for seed in (0, 1))
    points = read_points(lost_row)
    del points[1]
    write_points(lost_row, points)
    interrupt_after_first_epoch(interrupted)
    capsys.readouterr()

    run_compare(SHIPPED_SPEC, curve_overrides(data_root, out))

    log = capsys.readouterr().out
    assert "run 'simclr' seed 1: resuming after epoch 0" in log
    assert curve_lines(log) == [
        "[compare] run 'simclr' seed 0: learning curve at epoch 1 (1/1): probes, kNN",
        "[compare] run 'simclr' seed 1: learning curve at epoch 2 (1/1): probes, kNN",
    ]
    assert sorted(read_points(lost_row)) == sorted(read_points(interrupted)) == [1, 2, 3]
    written = [(f / "curve.csv").stat().st_mtime_ns for f in (lost_row, interrupted)]

    run_compare(SHIPPED_SPEC, curve_overrides(data_root, out))

    log = capsys.readouterr().out
    assert curve_lines(log) == [] and log.count("already evaluated\n") == 2  # not even started
    assert [(f / "curve.csv").stat().st_mtime_ns for f in (lost_row, interrupted)] == written


@pytest.mark.slow
def test_runs_of_different_budgets_have_no_curve_point_past_their_own(data_root, tmp_path):
    out = tmp_path / "cmp"
    runs = "runs=[{name: diet, config_name: diet, budget: {max_epochs: 2}}, {name: simclr, config_name: simclr}]"  # noqa: E501
    extra = ["budget.max_epochs=4", "curves.points=2", "seeds=[0]", "reference_rows=[]", runs]
    run_compare(SHIPPED_SPEC, tiny_overrides(data_root, out) + extra)

    with (out / "learning_curves.csv").open() as f:
        gathered = [
            (r["run"], int(r["epoch"]), float(r["samples_seen"])) for r in csv.DictReader(f)
        ]
    assert gathered == [
        ("diet", 1, IMAGES_PER_EPOCH),
        ("diet", 2, 2 * IMAGES_PER_EPOCH),
        ("simclr", 2, 2 * IMAGES_PER_EPOCH * SIMCLR_VIEWS),
        ("simclr", 4, 4 * IMAGES_PER_EPOCH * SIMCLR_VIEWS),
    ]
    assert [p.name for p in (out / "runs/diet/seed_0/curves").glob("*.ckpt")] == ["epoch_1.ckpt"]
    for run in ("diet", "simclr"):  # every point has the logistic-regression probe
        points = read_points(out / "runs" / run / "seed_0").values()
        assert all(0.0 <= point["logreg_acc1"] <= 100.0 for point in points)
