"""``solo-diet compare`` with ``seeds`` and the reference rows, end to end on a tiny ImageFolder,
through the GPU data path (on CPU tensors here)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import run_compare
from solo_diet.compare.run.runner import JobsFailed
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo

SEEDS = (0, 1)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


# every claim names its source's budget and definition (here the run's own: a test)
PAPER = "paper_budget: {epochs: 3}, definition: a test"


def seeded_overrides(data_root: Path, output_dir: Path) -> list[str]:
    return tiny_overrides(data_root, output_dir) + [
        "data.format=gpu",
        "budget.max_epochs=3",
        "budget.checkpoint_every_n_epochs=2",
        "budget.val_every_n_epochs=2",
        f"seeds=[{','.join(map(str, SEEDS))}]",
        "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]",
        "claims=[{text: diet beats simclr, metric: linear_acc1, better: [diet], than: [simclr],"
        f" {PAPER}}}, {{text: diet learns faster, metric: val_acc1, epoch: 2, better: [diet],"
        f" than: [simclr], {PAPER}}}]",
    ]


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def two_pooled_std(stds: list[float]) -> float:
    """Two pooled standard deviations of two runs of two seeds each."""
    return 2 * math.sqrt((stds[0] ** 2 + stds[1] ** 2) / 2)


def table_cells(report: str, run: str) -> dict[str, str]:
    """{column: cell} of ``run``'s row in the report's first table (mean ± std)."""
    lines = report.splitlines()
    header = next(i for i, li in enumerate(lines) if li.startswith("| run | "))
    names = [c.strip() for c in lines[header].strip("|").split("|")]
    row = next(li for li in lines[header:] if li.startswith(f"| {run} | "))
    return dict(zip(names, (c.strip() for c in row.strip("|").split("|"))))


@pytest.mark.slow
def test_seeds_and_reference_rows_end_to_end(data_root, tmp_path):
    out = tmp_path / "cmp"
    report = run_compare(SHIPPED_SPEC, seeded_overrides(data_root, out)).read_text()

    rows = read_rows(out / "results.csv")
    assert [(r["run"], r["seed"]) for r in rows] == [
        ("diet", "0"),
        ("diet", "1"),
        ("simclr", "0"),
        ("simclr", "1"),
        ("diet", "mean"),
        ("simclr", "mean"),
        ("random_init", "0"),
        ("random_init", "1"),
        ("raw_pixels", ""),  # no seed changes it: evaluated once
        ("random_init", "mean"),
        ("raw_pixels", "mean"),
    ]
    by_key = {(r["run"], r["seed"]): r for r in rows}
    for run in ("diet", "simclr"):
        aggregate = by_key[(run, "mean")]
        assert aggregate["n_seeds"] == "2"
        for metric in ("linear_acc1", "knn_acc1", "rankme", "kmeans_nmi", "train_s"):
            values = [float(by_key[(run, str(s))][metric]) for s in SEEDS]
            assert float(aggregate[metric]) == pytest.approx(statistics.fmean(values), abs=1e-9)
            assert float(aggregate[f"{metric}_std"]) == pytest.approx(
                statistics.stdev(values), abs=1e-9
            )
        for seed in SEEDS:  # every 2 epochs + the last; validation in epoch 1 only
            job = out / "runs" / run / f"seed_{seed}"
            kept = sorted(p.name.split("-ep=")[1] for p in job.glob("pretrain/**/*.ckpt"))
            assert kept == ["0.ckpt", "2.ckpt"]
            with (job / "epochs.csv").open() as f:
                validated = [r["epoch"] for r in csv.DictReader(f) if r["val_acc1"] != ""]
            assert validated == ["1"]
            args = json.loads(next(job.glob("pretrain/**/args.json")).read_text())
            assert args["seed"] == seed

    # the significance marks follow the two-pooled-std rule, recomputed from the CSV, with two
    # seeds floored at two standard errors of the accuracy on the val images
    val_images = sum(1 for path in (data_root / "val").rglob("*") if path.is_file())
    means = {run: by_key[(run, "mean")] for run in ("diet", "simclr")}
    for metric in ("linear_acc1", "knn_acc1"):
        best = max(means, key=lambda run: float(means[run][metric]))
        other = "simclr" if best == "diet" else "diet"
        gap = float(means[best][metric]) - float(means[other][metric])
        stds = [float(means[run][f"{metric}_std"]) for run in (best, other)]
        p = (float(means[best][metric]) + float(means[other][metric])) / 200
        floor = 200 * math.sqrt(p * (1 - p) / val_images)
        resolved = gap > max(two_pooled_std(stds), floor)
        best_cell, other_cell = (table_cells(report, run)[metric] for run in (best, other))
        assert best_cell.startswith("**") and "±" in best_cell
        assert other_cell.endswith("†") == resolved
        words = next(li for li in report.splitlines() if li.startswith(f"- `{metric}`: best"))
        assert (f"below it by more than the threshold: {other} " in words) == resolved
        assert ("not resolved" in words) == (not resolved and gap != 0)
    assert f"two standard errors of the accuracy on the {val_images:,} val images" in report
    assert table_cells(report, "diet")["epochs"] == "3"  # the seeds agree: no "3.00 ± 0.00"

    # where and when: every job's device and end time, and the command, in a section of its own
    assert all(r["device"] == "CPU" for r in rows if r["seed"] != "mean")
    record = report.split("## Where and when the jobs ran")[1].split("![")[0]
    assert "- CPU: 7 job(s), finished 20" in record  # 2 runs x 2 seeds, random_init x 2, pixels
    command = (out / "commands.txt").read_text().splitlines()
    assert len(command) == 1 and f" output_dir={out} " in command[0]
    assert f"solo-diet compare {SHIPPED_SPEC}" in record and "visible GPU(s)" in record

    # the claims open the report, judged by the same rule
    lines = report.splitlines()
    assert lines[2] == "Claims checked against the seeds:" and lines[6].startswith("Data:")
    gap = float(means["diet"]["linear_acc1"]) - float(means["simclr"]["linear_acc1"])
    stds = [float(means[run]["linear_acc1_std"]) for run in ("diet", "simclr")]
    two_std = two_pooled_std(stds)
    p = (float(means["diet"]["linear_acc1"]) + float(means["simclr"]["linear_acc1"])) / 200
    floor = 200 * math.sqrt(p * (1 - p) / val_images)  # two seeds: the floor applies
    line = max(two_std, floor)
    outcome = "held" if gap > line else "reversed" if -gap > line else "not resolved"
    floored = f", floor {floor:.2f}" if floor > two_std else ""
    assert lines[3].startswith("- **")
    assert ": diet beats simclr (`linear_acc1`; solo-learn's LinearModel probe" in lines[3]
    assert (
        f"diet − simclr = {gap:+.2f} (2 pooled std {two_std:.2f}{floored}: {outcome})" in lines[3]
    )
    assert ": diet learns faster (`val_acc1` after 2 epochs): diet − simclr = " in lines[4]

    # --report-only rewrites the report from the results (a new claim here) and runs nothing
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/result.json")}
    claim = f"{{text: pixels, metric: knn_acc1, better: [simclr], at_least: -1000, {PAPER}}}"
    again = run_compare(
        SHIPPED_SPEC, seeded_overrides(data_root, out) + [f"claims=[{claim}]"], report_only=True
    )
    assert again.read_text().splitlines()[3].startswith("- **held**: pixels (`knn_acc1`): simclr")
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/result.json")} == stamps

    # seed 1 alone later (as a second machine's share): nothing is redone, the raw-pixel row
    # neither, though the call's first seed is now 1
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("result.json")}
    run_compare(SHIPPED_SPEC, seeded_overrides(data_root, out) + ["seeds=[1]"])
    assert {p: p.stat().st_mtime_ns for p in out.rglob("result.json")} == stamps

    state = torch.load(out / "references" / "raw_pixels" / "reference.ckpt", weights_only=True)
    assert state["state_dict"]["backbone.input_shape"].tolist() == [3, 32, 32]
    first, second = (
        torch.load(out / "references" / "random_init" / f"seed_{s}" / "reference.ckpt")
        for s in SEEDS
    )
    weights = first["state_dict"].keys()
    assert any(not torch.equal(first["state_dict"][k], second["state_dict"][k]) for k in weights)

    # run folders gathered into another output_dir without their checkpoints (as from other
    # machines), the data copied elsewhere too: a full run there keeps every result, trains nothing
    gathered, moved = tmp_path / "gathered", shutil.copytree(data_root, tmp_path / "moved")
    for folder in ("runs", "references"):
        shutil.copytree(out / folder, gathered / folder, ignore=shutil.ignore_patterns("*.ckpt"))
    out = gathered
    results = {p: p.stat().st_mtime_ns for p in out.glob("*/*/*/result.json")}
    results.update({p: p.stat().st_mtime_ns for p in out.glob("references/*/result.json")})
    run_compare(SHIPPED_SPEC, seeded_overrides(moved, out))
    assert len(results) == 7 and not list(out.rglob("*.ckpt"))
    assert {p: p.stat().st_mtime_ns for p in results} == results

    # a job stopped before its evaluation: --report-only keeps its curves and costs, says so
    (out / "runs" / "diet" / "seed_1" / "result.json").unlink()
    text = run_compare(SHIPPED_SPEC, seeded_overrides(data_root, out), report_only=True).read_text()
    assert (
        "**Unfinished**: 1 job stopped before the evaluation, after the epochs in brackets " in text
    )
    assert "of 3: diet seed 1 (3). Its row holds the pretraining costs" in text
    per_seed = {(r["run"], r["seed"]): r for r in read_rows(out / "results.csv")}
    assert per_seed[("diet", "1")]["epochs"] == "3" and per_seed[("diet", "1")]["linear_acc1"] == ""
    assert per_seed[("diet", "mean")]["n_seeds"] == "1"  # the seed its metrics come from
    assert "| diet | diet | 1 (+1 unfinished) |" in text
    assert per_seed[("diet", "mean")]["linear_acc1"] == per_seed[("diet", "0")]["linear_acc1"]

    # random_init: the first run's backbone at every seed, with its mean ± std like a run's;
    # raw_pixels: one evaluation, as no seed changes it
    inits = [by_key[("random_init", str(seed))] for seed in SEEDS]
    pixels = by_key[("raw_pixels", "")]
    assert {r["method"] for r in inits} == {"random_init"} and pixels["method"] == "raw_pixels"
    for row in (*inits, pixels):
        assert 0.0 <= float(row["linear_acc1"]) <= 100.0 and 0.0 <= float(row["knn_acc1"]) <= 100.0
        assert row["train_s"] == "" and row["linear_acc1_std"] == ""
        assert 1.0 <= float(row["rankme"])
    assert all(float(r["rankme"]) <= 8.0 + 1e-3 for r in inits)  # the width-8 backbone
    assert 8.0 < float(pixels["rankme"]) <= 15.0 + 1e-3  # 3072 pixels, 15 val images
    for seed in SEEDS:
        folder = out / "references" / "random_init" / f"seed_{seed}"
        init_args = json.loads((folder / "args.json").read_text())
        assert init_args["seed"] == seed and init_args["backbone"]["kwargs"] == {"width": 8}
    init_mean, pixels_mean = by_key[("random_init", "mean")], by_key[("raw_pixels", "mean")]
    values = [float(r["linear_acc1"]) for r in inits]
    assert init_mean["n_seeds"] == "2" and pixels_mean["n_seeds"] == "1"
    assert float(init_mean["linear_acc1_std"]) == pytest.approx(statistics.stdev(values), abs=1e-9)
    assert pixels_mean["linear_acc1_std"] in ("", "nan")
    words = next(li for li in report.splitlines() if li.startswith("- `linear_acc1` of `random"))
    assert f"{float(init_mean['linear_acc1']):.2f} ± {statistics.stdev(values):.2f}" in words
    assert "`linear_acc1` of `raw_pixels`" in report
    assert "Mean ± standard deviation over 2 seeds" in report and "## Per seed" in report
    per_seed = report.split("## Per seed")[1]
    assert "| raw_pixels | – | raw_pixels |" in per_seed and "None" not in per_seed
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert not math.isnan(float(by_key[("diet", "mean")]["linear_loss"]))

    # the data changed where it lies: the finished jobs are refused, never silently kept
    sorted((moved / "train").rglob("*.png"))[0].unlink()
    with pytest.raises(JobsFailed) as failed:
        run_compare(SHIPPED_SPEC, seeded_overrides(moved, out))
    assert "pretrained with another config, budget or data" in str(failed.value)
