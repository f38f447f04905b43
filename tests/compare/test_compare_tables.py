"""report.md's tables: the columns grouped by what they measure (pure Python, no solo-learn)."""

from __future__ import annotations

import math

from solo_diet.compare.report.tables import (
    cell_text,
    grouped_tables,
    mean_cell,
    row_cell,
    shown_columns,
)


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


def test_l2_strengths_and_gradients_read_in_scientific_notation():
    assert [cell_text(v, "logreg_l2") for v in (1e-4, 10**-5.5, 10.0)] == [
        *("1e-04", "3.2e-06", "1e+01")
    ]
    assert cell_text(3.7e-10, "logreg_grad_norm") == "3.7e-10"
    assert cell_text(0.5, "linear_loss") == "0.50" and cell_text(math.nan, "logreg_l2") == "–"
    row = {"run": "diet", "logreg_l2": 2e-4, "logreg_l2_std": 1.5e-4, "n_seeds": 3}
    assert mean_cell(row, "logreg_l2", set(), set()) == "2e-04 ± 1.5e-04"


def test_an_edge_choice_and_an_iteration_limit_are_marked_and_explained_under_their_table():
    fits = [
        {"run": "diet", "logreg_l2": 1e-8, "logreg_l2_edge": True, "logreg_iterations": 40},
        {"run": "simclr", "logreg_l2": 1e-3, "logreg_l2_edge": False, "logreg_iterations": 1000},
    ]
    fits[1]["logreg_hit_limit"] = True
    columns = shown_columns(fits)
    assert "logreg_l2_edge" not in columns and "logreg_hit_limit" not in columns
    lines = grouped_tables(fits, columns, row_cell)
    assert tables_by_heading(lines)["Logistic-regression fit"] == [
        *("run", "logreg_l2", "logreg_iterations")
    ]
    assert "| diet | 1e-08 ‡ | 40 |" in lines and "| simclr | 1e-03 | 1000 § |" in lines
    notes = lines[lines.index("| simclr | 1e-03 | 1000 § |") + 2]
    assert notes == (
        "‡: the chosen `logreg_l2` is an end of the grid. "
        "§: the fit stopped at its iteration limit."
    )
    unflagged = [{**fit, "logreg_l2_edge": False, "logreg_hit_limit": False} for fit in fits]
    plain_lines = grouped_tables(unflagged, columns, row_cell)
    assert not any("‡:" in line or "§:" in line for line in plain_lines)


def test_balanced_top1_is_shown_only_where_it_reads_otherwise_than_top1():
    even = [{"run": "diet", "logreg_acc1": 90.0, "logreg_balanced_acc1": 90.0 + 1e-12}]
    assert "logreg_balanced_acc1" not in shown_columns(even)
    uneven = [*even, {"run": "simclr", "logreg_acc1": 90.0, "logreg_balanced_acc1": 85.0}]
    assert "logreg_balanced_acc1" in shown_columns(uneven)


def test_results_made_before_the_recorded_fit_lack_its_columns_only():
    """A result.json with ``logreg_acc1`` and ``logreg_l2`` only (made before the fit's record):
    the other logistic-regression columns are not shown, and its cells read as before."""
    old = {"run": "diet", "seed": 0, "linear_acc1": 90.0, "logreg_acc1": 91.0, "logreg_l2": 1e-3}
    columns = shown_columns([old])
    assert [c for c in columns if c.startswith("logreg_")] == ["logreg_acc1", "logreg_l2"]
    assert [row_cell(old, c) for c in ("logreg_acc1", "logreg_l2", "logreg_iterations")] == [
        *("91.00", "1e-03", "–")
    ]


def test_the_legend_names_the_grid_its_results_record():
    """The grid from the results' ``logreg_sweep``; results without it do not pass for the
    current grid; results without the probe get no line."""
    from solo_diet.compare.report.markdown import _logreg_legend
    from solo_diet.core.metrics.logreg import L2_GRID

    new = {"logreg_acc1": 90.0, "logreg_sweep": {"l2": list(L2_GRID)}}
    (line,) = _logreg_legend([new])
    assert "chosen from 37 strengths evenly spaced in log scale, 1e-08 to 1e+01 by the" in line
    assert "`logreg_sweep` holds each strength's held-out top-1 and fit" in line
    (old,) = _logreg_legend([{"logreg_acc1": 90.0, "logreg_l2": 1e-3}])
    assert "from a grid these results do not record (they predate `logreg_sweep`)" in old
    assert "logreg_iterations" not in old
    assert _logreg_legend([{"linear_acc1": 90.0}]) == []
