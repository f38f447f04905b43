"""Learning curves: each run's probes and kNN at ``curves.points`` epochs, from snapshots."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import OmegaConf

from solo_diet.compare.plan.budgets import samples_seen
from solo_diet.compare.plan.jobs import Job, compose_linear
from solo_diet.compare.run.record import epoch_rows, progress
from solo_diet.compare.spec.settings import Spec
from solo_diet.core.atomic import atomic_write, write_text_atomic

if TYPE_CHECKING:
    from solo_diet.compare.evaluate.checkpoint import SharedEvaluator

CURVE_FILE = "curve.csv"  # a job's curve points, in its folder
SNAPSHOT_DIR = "curves"  # a job's backbone snapshots (+ args.json), in its folder
CURVE_COLUMNS = (
    "epoch",  # epochs trained
    "samples_seen",  # forward-backward samples up to then (samples_seen)
    "linear_acc1",
    "knn_acc1",
    "logreg_acc1",  # the converged logistic-regression probe (NaN in files made before it)
    "source",  # "snapshot", or "final": the job's final evaluation
    "wall_s",  # the point's evaluation wall time
    "fingerprint",  # the evaluation settings it was made with
)
TEXT_COLUMNS = ("source", "fingerprint")
CURVE_METRICS = (  # the metrics of a point, and their labels (the report's tables and plot)
    ("linear_acc1", "linear probe"),
    ("logreg_acc1", "logistic-regression probe"),
    ("knn_acc1", "kNN"),
)


def curve_epochs(points: int, epochs: int) -> list[int]:
    """``points`` epochs (at most one per epoch) evenly spaced up to ``epochs``, it included."""
    points = min(points, epochs)
    return [math.ceil(k * epochs / points) for k in range(1, points + 1)]


def snapshot_epochs(spec: Spec, job: Job) -> list[int]:
    """The curve's epochs whose backbone the pretraining saves (all but the last, the final)."""
    return curve_epochs(spec.curves.points, job.budget.epochs)[:-1]  # the run's own budget


def snapshot_path(run_dir: Path, epoch: int) -> Path:
    return run_dir / SNAPSHOT_DIR / f"epoch_{epoch}.ckpt"


def read_points(run_dir: Path) -> dict[int, dict[str, Any]]:
    """{epoch: row} of a job's ``curve.csv``; numbers as floats, a column it predates as NaN."""
    path = run_dir / CURVE_FILE
    if not path.is_file():
        return {}
    points = {}
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            row = {c: math.nan for c in CURVE_COLUMNS if c not in TEXT_COLUMNS} | {
                k: v if k in TEXT_COLUMNS else float(v) if v != "" else math.nan
                for k, v in raw.items()
            }
            points[int(row["epoch"])] = row
    return points


def write_points(run_dir: Path, points: dict[int, dict[str, Any]]) -> None:
    """Write ``curve.csv`` whole and atomically (the one place curve records are written)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=CURVE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(points[epoch] for epoch in sorted(points))
    write_text_atomic(run_dir / CURVE_FILE, text.getvalue())


class BackboneSnapshots(Callback):
    """Saves the backbone after each of ``epochs`` (rank 0); drops later points on a restart."""

    def __init__(self, run_dir: str | Path, epochs: Sequence[int]):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.epochs = frozenset(int(e) for e in epochs)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Drop the snapshots and points after the epochs already trained: they train again."""
        if not trainer.is_global_zero:
            return
        for path in (self.run_dir / SNAPSHOT_DIR).glob("epoch_*.ckpt"):
            if int(path.stem.partition("_")[2]) > trainer.current_epoch:
                path.unlink()
        points = read_points(self.run_dir)
        kept = {e: row for e, row in points.items() if e <= trainer.current_epoch}
        if kept != points:
            write_points(self.run_dir, kept)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        trained = trainer.current_epoch + 1
        if not trainer.is_global_zero or trained not in self.epochs:
            return
        folder = self.run_dir / SNAPSHOT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        args = OmegaConf.to_container(pl_module.cfg)
        write_text_atomic(folder / "args.json", json.dumps(args, default=str))
        weights = {
            f"backbone.{name}": tensor.detach().cpu().contiguous()
            for name, tensor in pl_module.backbone.state_dict().items()
        }
        with atomic_write(snapshot_path(self.run_dir, trained), binary=True) as handle:
            torch.save({"state_dict": weights, "epoch": trainer.current_epoch}, handle)


def missing_points(spec: Spec, job: Job, eval_fingerprint: str) -> list[int]:
    """A run job's snapshot epochs without a ``curve.csv`` row of these evaluation settings."""
    points = read_points(job.run_dir)
    return [
        epoch
        for epoch in snapshot_epochs(spec, job)
        if snapshot_path(job.run_dir, epoch).is_file()
        and points.get(epoch, {}).get("fingerprint") != eval_fingerprint
    ]


def _samples_until(run_dir: Path, epoch: int, views: int) -> float:
    rows = [r for r in epoch_rows(run_dir) if r["epoch"] < epoch]
    if not rows:
        return math.nan
    images = sum(r["samples"] for r in rows)
    return samples_seen(images if len(rows) == epoch else images / len(rows) * epoch, views)


def evaluate_curve(
    spec: Spec, job: Job, shared_eval: "SharedEvaluator", result: dict[str, Any]
) -> None:
    """Record the curve's last point (the final ``result``) and evaluate a run's missing points."""
    if spec.curves.points == 0 or job.reference is not None:
        return
    from solo_diet.launch.linear import run_linear
    from solo_diet.methods.checkpoint import PretrainedCheckpoint

    fingerprint, views = result["fingerprint"], job.budget.views

    def point(epoch: int, measured: dict, source: str, wall_s: float) -> dict[str, Any]:
        return {
            "epoch": epoch,
            "samples_seen": _samples_until(job.run_dir, epoch, views),
            **measured,
            "source": source,
            "wall_s": wall_s,
            "fingerprint": fingerprint,
        }

    last = job.budget.epochs  # rows past it (curves made before runs had own budgets) go
    points = {e: row for e, row in read_points(job.run_dir).items() if e <= last}
    final = {k: result.get(k, math.nan) for k, _ in CURVE_METRICS}  # NaN: a result made before it
    points[last] = point(last, final, "final", 0.0)
    write_points(job.run_dir, points)
    missing = missing_points(spec, job, fingerprint)
    for position, epoch in enumerate(missing, 1):
        progress(
            f"{job.label}: learning curve at epoch {epoch} ({position}/{len(missing)}): probes, kNN"
        )
        started, snapshot = time.time(), snapshot_path(job.run_dir, epoch)
        probe_cfg = compose_linear(spec, snapshot, job.run_dir)
        evaluator = shared_eval.get(spec, probe_cfg)
        linear = float(run_linear(probe_cfg).get("val_acc1", math.nan))
        measured = evaluator.curve_point(PretrainedCheckpoint(snapshot).backbone())
        measured = {"linear_acc1": linear, **measured}
        points[epoch] = point(epoch, measured, "snapshot", time.time() - started)
        write_points(job.run_dir, points)
    if missing:
        shown = ", ".join(
            f"{e}: " + "/".join(f"{points[e][m]:.1f}" for m, _ in CURVE_METRICS)
            for e in sorted(points)
        )
        progress(f"{job.label}: learning curve (epoch: linear/logistic regression/kNN %) {shown}")
