"""report.md's tables: the columns grouped by what they measure (pure Python, no solo-learn)."""

from __future__ import annotations

import math

from solo_diet.compare.tables import grouped_tables


def plain(row: dict, column: str) -> str:
    return str(row.get(column, math.nan))


def tables_by_heading(lines: list[str]) -> dict[str, list[str]]:
    """{heading: the header row's column names} of every table under a ``###`` heading."""
    tables, heading = {}, None
    for line in lines:
        if line.startswith("### "):
            heading = line[4:]
        elif line.startswith("| ") and heading not in tables:
            tables[heading] = [c.strip() for c in line.strip("|").split("|")]
    return tables


def test_each_column_lands_in_its_group_after_the_run_and_seed():
    columns = [
        *("run", "seed", "method", "epochs", "linear_acc1", "linear_loss", "knn_acc1", "rankme"),
        *("lidar", "kmeans_nmi", "kmeans_acc", "codes_used", "h_knn_acc1", "h_rankme", "h_nmi"),
        *("samples_per_s", "peak_gpu_mib", "something_new"),
    ]
    lines = grouped_tables([{"run": "diet", "seed": 0}], columns, plain)

    assert tables_by_heading(lines) == {
        "Accuracy": [
            *("run", "seed", "method", "epochs", "linear_acc1", "linear_loss", "knn_acc1"),
            "h_knn_acc1",
        ],
        "Representation": ["run", "seed", "rankme", "lidar", "h_rankme"],
        "Clustering": ["run", "seed", "kmeans_nmi", "kmeans_acc", "codes_used", "h_nmi"],
        "Cost": ["run", "seed", "samples_per_s", "peak_gpu_mib"],
        "Other": ["run", "seed", "something_new"],  # a column no group knows is still shown
    }
    assert "| diet | 0 | nan |" in lines  # the Other table's row


def test_a_group_without_columns_has_no_table():
    lines = grouped_tables([{"run": "diet"}], ["run", "method", "linear_acc1"], plain)
    assert [line for line in lines if line.startswith("### ")] == ["### Accuracy"]
