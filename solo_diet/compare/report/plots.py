"""The comparison's PNG plots: singular-value spectra and per-epoch pretraining curves."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Sequence

from solo_diet.compare.evaluate.curves import CURVE_METRICS
from solo_diet.compare.run.record import EPOCHS_FILE, seed_curves
from solo_diet.compare.verdicts.aggregate import has_value
from solo_diet.core.atomic import atomic_write

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
