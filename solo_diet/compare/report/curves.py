"""The report's learning curves (the jobs' curve points per run over seeds, as CSV, plot, text)
and its PNG plots: singular-value spectra and per-epoch pretraining curves."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Sequence

from solo_diet.compare.evaluate.curves import CURVE_FILE, CURVE_METRICS, SNAPSHOT_DIR, read_points
from solo_diet.compare.report.tables import mean_cell, table_lines, write_csv
from solo_diet.compare.run.record import EPOCHS_FILE, seed_curves
from solo_diet.compare.spec.settings import REFERENCE_ROWS, Spec
from solo_diet.compare.verdicts.aggregate import aggregate, has_value, is_number, two_pooled_std
from solo_diet.core.atomic import atomic_write

CURVES_CSV = "learning_curves.csv"
CURVES_PNG = "learning_curves.png"
CSV_COLUMNS = ("run", "epoch", "n_seeds", "samples_seen") + tuple(
    f"{metric}{suffix}" for metric, _ in CURVE_METRICS for suffix in ("", "_std", "_min", "_max")
)


CURVE_PANELS = (
    ("train_loss", "train loss"),
    ("val_acc1", "online probe val top-1 (%)"),
    ("val_loss", "online probe val loss"),
    ("val_rankme", "RankMe (val, backbone)"),
)


def plots_available() -> bool:
    """Whether matplotlib is installed (solo-diet's ``report`` extra); the report says so if not."""
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _saved(figure, path: Path) -> Path:
    figure.tight_layout()
    with atomic_write(path, binary=True) as png:
        figure.savefig(png, dpi=120, format="png")
    _pyplot().close(figure)
    return path


def _style(index: int) -> dict:
    return {"color": f"C{index % 10}", "linestyle": ("-", "--", ":")[index // 10 % 3]}


def plot_spectra(results: Sequence[dict], path: Path) -> Path:
    """Normalised singular values of each representation (val split), each run's first seed."""
    first_seeds: dict[str, dict] = {}
    for result in results:
        first_seeds.setdefault(result["run"], result)
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    spectra = [
        (result["run"] if key == "spectrum" else f"{result['run']} ({key[: -len('_spectrum')]})", s)
        for result in first_seeds.values()
        for key, s in result.items()
        if key.endswith("spectrum") and s
    ]
    for index, (label, spectrum) in enumerate(spectra):
        axis.semilogy(range(1, len(spectrum) + 1), spectrum, label=label, **_style(index))
    if spectra:  # below 1e-6 of the largest, values are numerical noise that squeezes the rest
        axis.set_ylim(max(axis.get_ylim()[0], 1e-6), 1.5)
    axis.set(
        xlabel="index k", ylabel="sigma_k / sigma_1", title="singular-value spectra (val features)"
    )
    if axis.lines:  # no result has a spectrum (every job failed): an empty panel, no legend
        axis.legend(fontsize=7)
    return _saved(figure, path)


def plot_curves(results: Sequence[dict], out: Path, path: Path) -> Path:
    """Per-epoch pretraining curves of every run (its jobs' ``epochs.csv``), a band over seeds."""
    folders: dict[str, list[Path]] = {}
    for result in results:
        if "job" in result and (out / result["job"] / EPOCHS_FILE).is_file():
            folders.setdefault(result["run"], []).append(out / result["job"])
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(4.2 * len(CURVE_PANELS), 3.6))
    for index, (run, run_folders) in enumerate(folders.items()):
        label = run if len(run_folders) == 1 else f"{run} ({len(run_folders)} seeds)"
        style = _style(index)
        for axis, (column, _) in zip(axes, CURVE_PANELS):
            curve = sorted(seed_curves(run_folders, column).items())
            if not curve:
                continue
            epochs = [epoch for epoch, _ in curve]
            mean = [sum(v) / len(v) for _, v in curve]
            axis.plot(epochs, mean, marker=".", label=label, **style)
            if len(run_folders) > 1:
                low, high = [min(v) for _, v in curve], [max(v) for _, v in curve]
                axis.fill_between(epochs, low, high, color=style["color"], alpha=0.2)
    for axis, (_, title) in zip(axes, CURVE_PANELS):
        axis.set(xlabel="epoch", title=title)
    if folders:  # only reference rows (every run failed): empty panels, no legend
        axes[0].legend(fontsize=7)
    return _saved(figure, path)


LEARNING_AXES = (("epoch", "epochs trained"), ("samples_seen", "samples seen (views counted)"))


def plot_learning_curves(
    curves: dict[str, list[dict]], references: Sequence[dict], path: Path
) -> Path:
    """The probes' and kNN's top-1 of every run against epochs and samples seen."""
    plt = _pyplot()
    figure, axes = plt.subplots(
        len(CURVE_METRICS), len(LEARNING_AXES), figsize=(11, 4 * len(CURVE_METRICS))
    )
    for index, (run, rows) in enumerate(curves.items()):
        seeds = max(row["n_seeds"] for row in rows)
        label = run if seeds == 1 else f"{run} ({seeds} seeds)"
        style = _style(index)
        for (metric, _), metric_axes in zip(CURVE_METRICS, axes):
            for axis, (x_key, _) in zip(metric_axes, LEARNING_AXES):
                x = [row[x_key] for row in rows]
                axis.plot(x, [row[metric] for row in rows], marker="o", label=label, **style)
                if seeds > 1:
                    low, high = ([row[f"{metric}_{end}"] for row in rows] for end in ("min", "max"))
                    axis.fill_between(x, low, high, color=style["color"], alpha=0.2)
    for (metric, title), metric_axes in zip(CURVE_METRICS, axes):
        for axis, (_, x_label) in zip(metric_axes, LEARNING_AXES):
            for reference in (r for r in references if has_value(r, metric)):
                axis.axhline(reference[metric], color="0.5", linestyle="--", linewidth=1)
                where = dict(xycoords=("axes fraction", "data"), va="bottom")
                axis.annotate(
                    reference["run"], (0, reference[metric]), fontsize=7, color="0.4", **where
                )
            axis.set(xlabel=x_label, ylabel="top-1 (%)", title=f"{title}, val split")
    if curves:
        axes[0][0].legend(fontsize=7)
    return _saved(figure, path)


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
