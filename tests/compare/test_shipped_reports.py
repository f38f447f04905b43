"""Each shipped evidence report with ``records/`` rebuilds byte for byte from them with
``--report-only``: its verdicts are the rule's, read on the columns its records hold.

The data is not shipped: class folders stand in, counted as the dataset the runs trained on (the
budget line and the few-seeds floor read the counts), and the report names the data root the runs
used. The plots are not drawn (their files are not compared)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare.plan import budgets  # noqa: E402
from solo_diet.compare.report import curves as curves_report  # noqa: E402
from solo_diet.compare.run.runner import run_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "docs" / "compare"
# report: (the data root its runs used, train and val images, the overrides its runs were given)
SHIPPED = {
    "evidence_paper_budget_animal_mnist": (
        "/tmp/am",
        (8000, 2000),
        ["curves.points=5", "reference_rows=[]"],
    ),
    "evidence_small_data_fashion_mnist": ("/tmp/fm", (60000, 10000), []),
    # `data.format: auto` ran these on the GPU data path: `gpu` names it where no GPU is seen
    "evidence_cplearn": ("/tmp/am", (8000, 2000), ["data.format=gpu"]),
    "evidence_sem": ("/tmp/am", (8000, 2000), ["data.format=gpu"]),
    "evidence_sdiet": ("/tmp/am", (8000, 2000), ["data.format=gpu"]),
    "evidence_sdiet_batch16": ("/tmp/am", (8000, 2000), ["data.format=gpu"]),
    "evidence_sdiet_batch16_lr": ("/tmp/am", (8000, 2000), ["data.format=gpu"]),
}


def rebuild(name: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The report of ``docs/compare/<name>/records`` as ``--report-only`` writes it."""
    root, (train, val), overrides = SHIPPED[name]
    data = tmp / "data"
    for split in ("train", "val"):
        for label in range(10):
            (data / split / str(label)).mkdir(parents=True)
    counts = {str(data / "train"): train, str(data / "val"): val}
    monkeypatch.setattr(budgets, "folder_samples", lambda folder: [None] * counts[str(folder)])
    for plot in ("plot_spectra", "plot_curves"):
        monkeypatch.setattr(curves_report, plot, lambda *args: None)
    monkeypatch.setattr(curves_report, "plot_learning_curves", lambda *args: None)
    monkeypatch.setattr(curves_report, "plots_available", lambda: True)
    out = tmp / "out"
    shutil.copytree(REPORTS / name / "records", out)
    spec = ROOT / "benchmarks" / "compare" / f"{name}.yaml"
    overrides = [f"data.root={data}", *overrides, f"output_dir={out}"]
    written = run_spec(spec, overrides, report_only=True).report
    return written.read_text(encoding="utf-8").replace(str(data), root)


def test_every_report_with_records_is_rebuilt_here():
    assert sorted(path.parent.name for path in REPORTS.glob("*/records")) == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_report_rebuilds_byte_for_byte_from_its_records(name, tmp_path, monkeypatch):
    shipped = (REPORTS / name / "report.md").read_text(encoding="utf-8")
    assert rebuild(name, tmp_path, monkeypatch) == shipped
