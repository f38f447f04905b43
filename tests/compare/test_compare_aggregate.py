"""Seeds in a comparison report: aggregates and the two-pooled-standard-deviation rule."""

from __future__ import annotations

import math
import statistics

import pytest

from solo_diet.compare.verdicts.aggregate import (
    RANKED_METRICS,
    aggregate,
    rank,
    ranked_metrics,
    two_pooled_std,
    verdict,
)


def seed_rows(run: str, accuracies: list[float]) -> list[dict]:
    return [
        {"run": run, "seed": s, "method": run, "linear_acc1": a, "rankme": math.nan, "note": "x"}
        for s, a in enumerate(accuracies)
    ]


def test_aggregate_has_mean_and_sample_std_per_run_in_order():
    rows = aggregate(seed_rows("b", [70.0, 72.0, 74.5]) + seed_rows("a", [60.0]))
    assert [(r["run"], r["seed"], r["n_seeds"]) for r in rows] == [
        ("b", "mean", 3),
        ("a", "mean", 1),
    ]
    assert rows[0]["linear_acc1"] == statistics.fmean([70.0, 72.0, 74.5])
    assert rows[0]["linear_acc1_std"] == pytest.approx(
        statistics.stdev([70.0, 72.0, 74.5]), rel=1e-15
    )
    assert math.isnan(rows[1]["linear_acc1_std"])  # one seed: no spread
    assert math.isnan(rows[0]["rankme"]) and "note" not in rows[0] and "seed_std" not in rows[0]


def test_two_pooled_std_matches_the_formula_and_needs_two_seeds_per_group():
    a, b = [1.0, 2.0, 4.0], [3.0, 3.5]
    pooled = math.sqrt(
        (
            sum((x - statistics.fmean(a)) ** 2 for x in a)
            + sum((x - statistics.fmean(b)) ** 2 for x in b)
        )
        / (len(a) + len(b) - 2)
    )
    row_a = {"m_std": statistics.stdev(a), "n_seeds": 3}
    row_b = {"n_std": statistics.stdev(b), "n_seeds": 2}
    assert two_pooled_std(row_a, row_b, "m", "n") == pytest.approx(2 * pooled, rel=1e-14)
    assert math.isnan(two_pooled_std({"m_std": 1.0}, {"m_std": 1.0, "n_seeds": 3}, "m"))


def test_rank_marks_only_gaps_beyond_two_pooled_std():
    rows = aggregate(
        seed_rows("best", [80.0, 81.0, 82.0])  # std 1
        + seed_rows("close", [78.5, 79.5, 80.5])  # gap 1.5 < 2 * 1
        + seed_rows("far", [76.0, 77.0, 78.0])  # gap 4 > 2 * 1
        + seed_rows("tie", [81.5, 81.0, 80.5])  # same mean as best
        + seed_rows("single", [70.0])  # one seed: never resolved
    )
    ranking = rank(rows, "linear_acc1")
    assert ranking.best == "best" and ranking.tied == ("tie",) and ranking.best_mean == 81.0
    unresolved = tuple(g.better for g in ranking.gaps if not g.sign)
    assert ranking.resolved == ("far",) and unresolved == ("close", "single")
    words = verdict(ranking)
    assert words.startswith("`linear_acc1`: best **best, tie** (81.00)")
    assert "below it by more than the threshold: far -4.00 (2 pooled std 2.00); not resolved: " in (
        words
    )
    assert words.endswith("close -1.50 (2 pooled std 2.00), single -11.00 (one seed).")
    assert rank(rows, "knn_acc1") is None


def test_two_seeds_that_agree_resolve_no_gap_below_two_standard_errors_of_the_val_set():
    """A user's tiny compare: kNN 37.00 against 36.85 (3 of 2000 val images), the two seeds of
    each agreeing; the floor is 200 sqrt(p (1 - p) / 2000) at their average p."""
    rows = aggregate(seed_rows("simclr", [37.0, 37.0]) + seed_rows("diet", [36.8, 36.9]))
    [pair] = rank(rows, "linear_acc1", val_images=2000).gaps
    p = (37.0 + 36.85) / 200
    assert pair.line == pytest.approx(200 * math.sqrt(p * (1 - p) / 2000), rel=1e-12)
    assert pair.two_std < 0.15 < pair.line and pair.sign == 0
    assert pair.short() == f"diet -0.15 (2 pooled std {pair.two_std:.2f}, floor {pair.line:.2f})"
    wide = aggregate(seed_rows("simclr", [47.0, 47.0]) + seed_rows("diet", [36.8, 36.9]))
    assert rank(wide, "linear_acc1", val_images=2000).resolved == ("diet",)
    # a column with no floor, or no val count: not resolved on fewer than 3 seeds
    [pair] = rank(wide, "linear_acc1").gaps
    assert pair.sign == 0 and pair.short() == "diet -10.15 (fewer than 3 seeds)"
    for row in wide:
        row["kmeans_nmi"], row["kmeans_nmi_std"] = row["linear_acc1"] / 100, 0.0
    assert rank(wide, "kmeans_nmi", val_images=2000).resolved == ()
    # three seeds: the two pooled std alone, however small
    three = aggregate(seed_rows("simclr", [37.0] * 3) + seed_rows("diet", [36.85] * 3))
    assert rank(three, "linear_acc1", val_images=2000).resolved == ("diet",)


def test_a_declared_representation_is_ranked_where_higher_is_better():
    columns = ["run", "linear_acc1", "kmeans_chance_nmi", "z_knn_acc1", "z_rankme", "z_linear_acc1"]
    columns += ["words_nmi", "words_ami", "words_used", "sem_knn_acc1"]
    assert ranked_metrics(columns) == [
        *RANKED_METRICS,
        "z_knn_acc1",
        "z_linear_acc1",
        "words_nmi",
        "words_ami",
    ]


def test_a_seed_stopped_before_its_evaluation_counts_only_in_costs_not_in_the_pooled_std():
    stopped = {"run": "other", "seed": 2, "method": "other", "train_s": 30.0, "unfinished": True}
    stopped["epochs"] = 69
    other = seed_rows("other", [75.8, 80.0])
    for row in other:
        row["train_s"], row["epochs"] = 10.0, 100
    alone = {"run": "alone", "seed": 0, "method": "alone", "epochs": 7, "unfinished": True}
    rows = aggregate(seed_rows("best", [81.9, 82.0, 82.1]) + other + [stopped, alone])
    best_row, other_row, alone_row = rows
    assert (other_row["n_seeds"], other_row["unfinished"]) == (2, 1)
    assert "unfinished" not in best_row
    assert other_row["train_s"] == pytest.approx(50.0 / 3, rel=1e-15)  # its costs count
    # ... but not its epochs, which would read 89.67 ± 17.90 beside metrics of 100-epoch seeds;
    # a run with no evaluated seed shows how far its seeds got
    assert (other_row["epochs"], other_row["epochs_std"]) == (100.0, 0.0)
    assert (alone_row["n_seeds"], alone_row["epochs"]) == (0, 7.0)
    # two pooled std with the two evaluated seeds: 3.43 < gap 4.1 (with the stopped seed counted
    # as a third: 4.20, not resolved)
    two_std = two_pooled_std(best_row, other_row, "linear_acc1")  # 3 and 2 seeds
    assert two_std == pytest.approx(2 * math.sqrt((2 * 0.1**2 + 4.2**2 / 2) / 3), rel=1e-12)
    assert rank(rows, "linear_acc1", val_images=2000).resolved == ("other",)
