"""The comparison's outputs from its jobs' results: ``results.csv``, PNG plots and ``report.md``."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig

RESULT_COLUMNS = (
    "run",
    "method",
    "epochs",
    "linear_acc1",
    "linear_loss",
    "knn_acc1",
    "rankme",
    "lidar",
    "kmeans_nmi",
    "kmeans_ami",
    "kmeans_ari",
    "kmeans_acc",
    "kmeans_chance_nmi",
    "codes_nmi",
    "codes_ami",
    "codes_used",
    "sem_linear_acc1",
    "sem_knn_acc1",
    "sem_rankme",
    "sem_lidar",
    "pretrain_wall_s",
    "train_s",
    "samples_per_s",
    "peak_gpu_mib",
    "checkpoint",
)
NOT_COLUMNS = ("fingerprint",)


def result_columns(results: Sequence[dict]) -> list[str]:
    """``RESULT_COLUMNS``, then the scalar columns of extra representations other methods declare
    (``<name>_knn_acc1``, ...), before ``checkpoint``."""
    extra: list[str] = []
    for result in results:
        for key, value in result.items():
            scalar = isinstance(value, (int, float, str)) or value is None
            if scalar and key not in RESULT_COLUMNS and key not in NOT_COLUMNS and key not in extra:
                extra.append(key)
    return [*RESULT_COLUMNS[:-1], *extra, RESULT_COLUMNS[-1]]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def write_results_csv(results: Sequence[dict], path: Path) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=result_columns(results), extrasaction="ignore", restval=""
        )
        writer.writeheader()
        writer.writerows(results)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_spectra(results: Sequence[dict], path: Path) -> Path:
    """Singular values of each representation (val split), divided by the largest, log scale."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        for key, spectrum in result.items():
            if key.endswith("spectrum") and spectrum:
                prefix = key[: -len("_spectrum")]
                label = (
                    result["run"] if key == "spectrum" else f"{result['run']} ({prefix.upper()})"
                )
                axis.semilogy(range(1, len(spectrum) + 1), spectrum, label=label)
    axis.set(
        xlabel="index k", ylabel="sigma_k / sigma_1", title="singular-value spectra (val features)"
    )
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_curves(results: Sequence[dict], out: Path, path: Path) -> Path:
    """Per-epoch pretraining curves of every run (``epochs.csv``): loss, online probe, RankMe."""
    from solo_diet.callbacks import read_epoch_rows

    panels = (
        ("train_loss", "train loss"),
        ("val_acc1", "online probe val top-1 (%)"),
        ("val_loss", "online probe val loss"),
        ("val_rankme", "RankMe (val, backbone)"),
    )
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for result in results:
        csv_path = out / "runs" / result["run"] / "epochs.csv"
        rows = read_epoch_rows(csv_path) if csv_path.is_file() else []
        for axis, (column, _) in zip(axes, panels):
            points = [
                (r["epoch"], r[column]) for r in rows if column in r and not math.isnan(r[column])
            ]
            if points:
                axis.plot(*zip(*points), marker=".", label=result["run"])
    for axis, (_, title) in zip(axes, panels):
        axis.set(xlabel="epoch", title=title)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _legend(spec: DictConfig) -> list[str]:
    """What each column means, with the settings that produced it."""
    settings = spec.evaluation
    return [
        f"- `linear_acc1`/`linear_loss`: solo-learn LinearModel on the frozen backbone, val split "
        f"(`{spec.linear.config_name}` + {list(spec.linear.overrides)}).",
        f"- `knn_acc1`: WeightedKNNClassifier (k={settings.knn_k}, T={settings.knn_temperature}, "
        f"{settings.knn_distance}), train bank -> val, eval transform.",
        f"- `rankme`: RankMe of the first {settings.rankme_samples} val features (uncentred). "
        f"`lidar`: LiDAR on {settings.lidar_samples} val images x {settings.lidar_views} "
        f"augmented views "
        f"(delta={settings.lidar_delta}). `sem_*`: the same on the SEM representation of `_sem` "
        f"runs "
        "(`sem_linear_acc1`: the same probe with `probe: sem`).",
        "- `kmeans_*`: k-means++ / Lloyd (k = number of classes, 5 seeded starts) of the "
        "L2-normalised val "
        "features: NMI, AMI, ARI, Hungarian accuracy and permutation-chance NMI. `codes_*`: NMI, "
        "AMI and "
        "number of used codes of the argmax code of `cplearn*` runs on the val split.",
        "- `pretrain_wall_s`: wall time of the pretraining calls (startup included); `train_s`, "
        "`samples_per_s`, `peak_gpu_mib`: summed / max over epochs of the training loops "
        "(EpochCostLogger).",
    ]


def write_report(spec: DictConfig, results: Sequence[dict], out: Path) -> Path:
    """results.csv, spectra.png, curves.png and report.md (a table and the settings)."""
    write_results_csv(results, out / "results.csv")
    plot_spectra(results, out / "spectra.png")
    plot_curves(results, out, out / "curves.png")
    columns = [
        c
        for c in result_columns(results)
        if c != "checkpoint" and any(_cell(r.get(c, math.nan)) != "–" for r in results)
    ]
    budget = spec.budget
    limit = (
        f", limit_train_batches {budget.limit_train_batches}" if budget.limit_train_batches else ""
    )
    lines = [
        f"# Comparison: {spec.name}",
        "",
        f"Data: `{spec.data.dataset}` train `{spec.data.train_path}`, val `{spec.data.val_path}`. "
        f"Budget (every run): {budget.max_epochs} epochs, batch {budget.batch_size}{limit}. "
        f"Trainer overrides: {list(spec.trainer)}.",
        "",
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
    ]
    lines += ["| " + " | ".join(_cell(r.get(c, math.nan)) for c in columns) + " |" for r in results]
    lines += ["", *_legend(spec), "", "![singular-value spectra](spectra.png)", ""]
    lines += ["![pretraining curves](curves.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
