"""The report's tables and ``results.csv``: cells, and columns grouped by what they measure."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from solo_diet.compare.verdicts.aggregate import NOT_AGGREGATED, is_number
from solo_diet.core.atomic import atomic_write

COST_COLUMNS = ("pretrain_wall_s", "evaluation_wall_s", "train_s", "samples_per_s", "peak_gpu_mib")
NOT_SHOWN = ("device", "finished_utc", "checkpoint")  # in results.csv, not in report.md's tables
RESULT_COLUMNS = (  # by what they measure
    *("run", "seed", "method", "epochs"),
    *("linear_acc1", "linear_loss", "logreg_acc1", "logreg_balanced_acc1", "logreg_heldout_acc1"),
    *("logreg_l2", "logreg_l2_edge", "logreg_iterations", "logreg_grad_norm", "logreg_hit_limit"),
    *("knn_acc1", "rankme", "lidar"),
    *("kmeans_nmi", "kmeans_ami", "kmeans_ari", "kmeans_acc", "kmeans_chance_nmi"),
    *("codes_nmi", "codes_ami", "codes_used"),
    *("embedding_knn_acc1", "embedding_rankme", "embedding_lidar"),
    *("sem_linear_acc1", "sem_knn_acc1", "sem_rankme", "sem_lidar"),
    *COST_COLUMNS,
    *NOT_SHOWN,
)
# keys of a result that are no column (n_seeds and the *_std columns: aggregates)
NOT_COLUMNS = ("fingerprint", "recipe", "job", "n_seeds", "unfinished")
RESOLVED_MARK = "†"
# how the logistic-regression probe got its `logreg_acc1` (docs/compare.md, "Evaluation")
FIT_COLUMNS = ("logreg_heldout_acc1", "logreg_l2", "logreg_iterations", "logreg_grad_norm")
SCIENTIFIC = ("logreg_l2", "logreg_grad_norm")  # columns whose values span decades: 3.2e-06
# a logistic-regression fit's flags, shown as a mark on a column rather than as columns
FIT_MARKS = {
    "logreg_l2": ("logreg_l2_edge", "‡", "the chosen `logreg_l2` is an end of the grid"),
    "logreg_iterations": ("logreg_hit_limit", "§", "the fit stopped at its iteration limit"),
}
# report.md's tables: each group's columns after the run (and seed); a column of none goes last
ACCURACY = ("method", "n_seeds", "epochs")
COLUMN_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("Accuracy", lambda c: c in ACCURACY or c.endswith(("_acc1", "_loss"))),
    ("Logistic-regression fit", lambda c: c in FIT_COLUMNS),
    ("Representation", lambda c: c.endswith(("rankme", "lidar"))),
    (
        "Clustering",
        lambda c: c.startswith("kmeans_") or c.endswith(("_nmi", "_ami", "_ari", "_used")),
    ),
    ("Cost", lambda c: c in COST_COLUMNS),
)


def result_columns(results: Sequence[dict]) -> list[str]:
    """``RESULT_COLUMNS``, the scalar columns methods declare inserted before ``checkpoint``."""
    extra: list[str] = []
    for result in results:
        for key, value in result.items():
            scalar = isinstance(value, (int, float, str)) or value is None
            known = key in RESULT_COLUMNS or key in NOT_COLUMNS or key.endswith("_std")
            if scalar and not known and key not in extra:
                extra.append(key)
    return [*RESULT_COLUMNS[:-1], *extra, RESULT_COLUMNS[-1]]


def cell_text(value: Any, column: str = "") -> str:
    """A cell: "–" for None or NaN, 2 decimals, 2 significant digits in a ``SCIENTIFIC`` column."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.1e}".replace(".0e", "e") if column in SCIENTIFIC else f"{value:.2f}"
    return str(value)


def row_cell(row: dict, column: str) -> str:
    """``row``'s cell of ``column``, marked where its fit's flag (``FIT_MARKS``) is set."""
    text = cell_text(row.get(column, math.nan), column)
    flag, mark, _ = FIT_MARKS.get(column, ("", "", ""))
    return f"{text} {mark}" if row.get(flag) is True else text


def write_results_csv(rows: Sequence[dict], path: Path, seeds: bool = False) -> Path:
    """One row per entry of ``rows``; with ``seeds`` also ``n_seeds`` and each numeric ``_std``."""
    columns = result_columns(rows)
    if seeds:
        numeric = {  # the columns with a number in some row
            c for c in columns if c not in NOT_AGGREGATED and any(is_number(r.get(c)) for r in rows)
        }
        columns = [x for c in columns for x in ((c, f"{c}_std") if c in numeric else (c,))]
        columns.insert(columns.index("seed") + 1, "n_seeds")
    return write_csv(path, columns, rows)


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict]) -> Path:
    """``rows`` under ``columns`` (other keys ignored, missing ones empty), whole or not at all."""
    with atomic_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


def integer_columns(rows: Sequence[dict]) -> set[str]:
    """The columns whose every value is an integer (``epochs``)."""
    numeric = {column for row in rows for column, value in row.items() if is_number(value)}
    return {c for c in numeric if all(isinstance(r[c], int) for r in rows if is_number(r.get(c)))}


def mean_cell(
    row: dict, column: str, best: set[str], resolved: set[str], integer: bool = False
) -> str:
    """``mean ± std``, bold for the best run, † for a resolved gap to it."""
    std = row.get(f"{column}_std", math.nan)
    mean = row.get(column, math.nan)
    spread = is_number(std) and not math.isnan(std)
    if integer and not (spread and std) and is_number(mean) and float(mean).is_integer():
        return str(int(mean))
    text = cell_text(mean, column)
    if text != "–" and spread:
        text += f" ± {cell_text(float(std), column)}"
    if row["run"] in best:
        return f"**{text}**"
    return f"{text} {RESOLVED_MARK}" if row["run"] in resolved else text


def table_lines(
    rows: Sequence[dict], columns: Sequence[str], cell: Callable[[dict, str], str]
) -> list[str]:
    """A Markdown table, each cell ``cell(row, column)``."""
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    return lines + ["| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows]


def shown_columns(rows: Sequence[dict]) -> list[str]:
    """Every result column some row has a value for, but the hidden ones."""
    hidden = {*NOT_SHOWN, *(flag for flag, _, _ in FIT_MARKS.values())}
    balanced, top1 = ("logreg_balanced_acc1", math.nan), ("logreg_acc1", math.nan)
    if all(cell_text(r.get(*balanced)) == cell_text(r.get(*top1)) for r in rows):
        hidden.add("logreg_balanced_acc1")
    return [
        c
        for c in result_columns(rows)
        if c not in hidden and any(cell_text(r.get(c, math.nan)) != "–" for r in rows)
    ]


def grouped_tables(
    rows: Sequence[dict], columns: Sequence[str], cell: Callable[[dict, str], str]
) -> list[str]:
    """One table per group of ``COLUMN_GROUPS``, each followed by its ``FIT_MARKS``' meaning."""
    lead = [c for c in ("run", "seed") if c in columns]
    groups: dict[str, list[str]] = {title: [] for title, _ in COLUMN_GROUPS}
    for column in (c for c in columns if c not in lead):
        title = "Logistic-regression fit" if column in FIT_COLUMNS else None
        title = title or next((t for t, member in COLUMN_GROUPS if member(column)), "Other")
        groups.setdefault(title, []).append(column)
    lines: list[str] = []
    for title, members in groups.items():
        if members:
            lines += [f"### {title}", "", *table_lines(rows, [*lead, *members], cell), ""]
            notes = [
                f"{mark}: {words}."
                for column, (flag, mark, words) in FIT_MARKS.items()
                if column in members and any(r.get(flag) is True for r in rows)
            ]
            lines += [" ".join(notes), ""] if notes else []
    return lines
