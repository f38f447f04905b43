"""The report's learning curves: the jobs' curve points per run over seeds, as CSV, plot, text."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from solo_diet.compare.evaluate.curves import CURVE_FILE, CURVE_METRICS, SNAPSHOT_DIR, read_points
from solo_diet.compare.report.plots import plot_learning_curves
from solo_diet.compare.report.tables import mean_cell, table_lines, write_csv
from solo_diet.compare.spec.settings import REFERENCE_ROWS, Spec
from solo_diet.compare.verdicts.aggregate import aggregate, has_value, is_number, two_pooled_std

CURVES_CSV = "learning_curves.csv"
CURVES_PNG = "learning_curves.png"
CSV_COLUMNS = ("run", "epoch", "n_seeds", "samples_seen") + tuple(
    f"{metric}{suffix}" for metric, _ in CURVE_METRICS for suffix in ("", "_std", "_min", "_max")
)


def _points(result: dict, out: Path) -> dict[int, dict]:
    """The curve points of ``result``'s job evaluated with its result's settings."""
    points = read_points(out / result["job"]).items()
    return {epoch: p for epoch, p in points if p.get("fingerprint") == result.get("fingerprint")}


def run_curves(results: Sequence[dict], out: Path) -> dict[str, list[dict[str, Any]]]:
    """{run: one row per epoch}: each curve metric's mean, ``_std``, ``_min``, ``_max``."""
    by_run: dict[str, dict[int, list[dict]]] = {}
    for result in results:
        if result["run"] in REFERENCE_ROWS or result.get("unfinished") or "job" not in result:
            continue
        for epoch, point in _points(result, out).items():
            by_run.setdefault(result["run"], {}).setdefault(epoch, []).append(point)
    curves = {}
    for run, by_epoch in by_run.items():
        rows = []
        for epoch in sorted(by_epoch):
            seeds = [{"run": run, **p} for p in by_epoch[epoch]]
            row = aggregate(seeds)[0] | {"epoch": epoch}
            for metric, _ in CURVE_METRICS:
                values = [p[metric] for p in seeds if not math.isnan(p[metric])]
                row[f"{metric}_min"] = min(values, default=math.nan)
                row[f"{metric}_max"] = max(values, default=math.nan)
            rows.append(row)
        curves[run] = rows
    return curves


def _last_step(rows: Sequence[dict], metric: str) -> str:
    if len(rows) < 2:
        return "one point"
    before, last = rows[-2], rows[-1]
    gap = last[metric] - before[metric]
    spread = two_pooled_std(before, last, metric)
    if math.isnan(spread):
        word = "one seed: not resolved"
    elif abs(gap) <= spread:
        word = f"flat within 2 pooled std {spread:.2f}"
    else:
        word = f"{'rising' if gap > 0 else 'falling'}, beyond 2 pooled std {spread:.2f}"
    return f"{gap:+.2f} since epoch {before['epoch']} ({word})"


def _reading(run: str, rows: Sequence[dict]) -> str:
    parts = []
    for metric, label in CURVE_METRICS:
        scored = [r for r in rows if has_value(r, metric)]
        if not scored:
            continue
        best = max(scored, key=lambda r: (r[metric], r["epoch"]))  # the latest of equal bests
        peak = (
            "its best point"
            if best is scored[-1]
            else f"best {best[metric]:.2f} at epoch {best['epoch']}"
        )
        parts.append(
            f"{label} {scored[-1][metric]:.2f} at epoch {scored[-1]['epoch']} ({peak}), "
            f"{_last_step(scored, metric)}"
        )
    seeds = max(r["n_seeds"] for r in rows)
    return f"- `{run}` ({seeds} seed{'s' * (seeds != 1)}): " + "; ".join(parts) + "."


def _table(curves: dict[str, list[dict]], metric: str) -> list[str]:
    epochs = sorted({row["epoch"] for rows in curves.values() for row in rows})
    cells = [  # each run's cells by epoch ("–" where it has no point)
        {"run": run, **{str(row["epoch"]): mean_cell(row, metric, set(), set()) for row in rows}}
        for run, rows in curves.items()
    ]
    return table_lines(cells, ["run", *map(str, epochs)], lambda row, column: row.get(column, "–"))


def _cost_line(results: Sequence[dict], out: Path) -> str:
    runs = [r for r in results if "job" in r and r["run"] not in REFERENCE_ROWS]
    evaluations = [
        point["wall_s"]
        for result in runs
        for point in _points(result, out).values()
        if point.get("source") == "snapshot"
    ]
    pretrain = sum(r["pretrain_wall_s"] for r in runs if is_number(r.get("pretrain_wall_s")))
    share = f" ({100 * sum(evaluations) / pretrain:.0f} % of the runs' pretraining wall time)"
    return (
        "Each point is the offline linear probe and kNN of the backbone saved at that epoch "
        f"(`{SNAPSHOT_DIR}/epoch_<E>.ckpt` in each job's folder), measured like the final "
        f"checkpoint, whose evaluation is the last point. The {len(evaluations)} snapshot "
        f"evaluations took {sum(evaluations):.0f} s" + (share if pretrain > 0 else "") + "."
    )


def learning_curve_lines(
    spec: Spec, results: Sequence[dict], out: Path, plotted: bool
) -> list[str]:
    """The report's "Learning curves" section; writes ``learning_curves.csv`` (and ``.png``)."""
    curves = run_curves(results, out)
    if not curves and spec.curves.points == 0:
        return []
    lines = ["## Learning curves", ""]
    if not curves:
        return lines + [
            f"No curve points: no job's folder has a `{CURVE_FILE}` of its evaluation settings "
            "(pretrained before `curves.points` was set, or not evaluated yet).",
            "",
        ]
    write_csv(out / CURVES_CSV, CSV_COLUMNS, (row for rows in curves.values() for row in rows))
    lines += [
        "Linear probe, logistic-regression probe and kNN top-1 (%) at evenly spaced epochs of "
        "each run's own budget, mean "
        f"± std over seeds (`{CURVES_CSV}`: also min, max and samples seen). "
        f"{_cost_line(results, out)} "
        "The last interval's change is read like the † marks: beyond two pooled standard "
        "deviations of the two points' seeds it is rising or falling, within them flat.",
        "",
        *(_reading(run, rows) for run, rows in curves.items()),
        "",
    ]
    for metric, label in CURVE_METRICS:
        lines += [f"{label} (`{metric}`) by epoch:", "", *_table(curves, metric), ""]
    if plotted:
        references = aggregate([r for r in results if r["run"] in REFERENCE_ROWS])
        plot_learning_curves(curves, references, out / CURVES_PNG)
        lines += [
            f"![learning curves: the probes and kNN against epochs and samples seen]({CURVES_PNG})",
            "",
            "Mean over seeds, band from their minimum to maximum; samples seen count every view "
            "(a two-view method sees twice the samples of a one-view one per epoch); dashed: the "
            "reference rows.",
            "",
        ]
    return lines
