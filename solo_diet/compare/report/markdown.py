"""The comparison's ``results.csv``, plots and ``report.md`` (docs/compare.md, "How to read")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

from solo_diet.compare.plan import budgets as plan
from solo_diet.compare.report import curves, tables
from solo_diet.compare.run.record import run_record_lines
from solo_diet.compare.spec.settings import REFERENCE_ROWS, SEEDED_REFERENCES, Spec
from solo_diet.compare.verdicts import aggregate as agg
from solo_diet.compare.verdicts.claims import PROBE_WORDS, claim_lines
from solo_diet.core.atomic import write_text_atomic
from solo_diet.core.metrics.logreg import GRADIENT_TOLERANCE, HELD_OUT_EVERY, MAX_ITERATIONS
from solo_diet.launch.settings import FORMAT_KEY

FEW_SEEDS = (
    f" With fewer than {agg.MIN_SEEDS} seeds a standard deviation rests on one or two degrees of "
    "freedom and can come out near 0, so a gap of a top-1 accuracy there must also cross a floor, "
    "{floor}; other columns are not resolved on so few seeds."
)
PARTIAL = "left out of every table and verdict, as they have no result yet: "
NOTES_FILE = "notes.md"  # a report's own reading, kept in `output_dir` and put under its claims
NO_PLOTS = (
    "No plots: matplotlib is not installed (`pip install matplotlib`, or solo-diet's `report` "
    "extra, draws `spectra.png` and `curves.png`)."
)
# the column suffixes of a representation a method declares (ExtraRepresentation)
REPRESENTATION_MEASURES = tuple(
    f"_{m}" for m in ("linear_acc1", *agg.EMBEDDING_MEASURES, *agg.CODE_MEASURES.values())
)


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def _fitted_batch(results: Sequence[dict]) -> str:
    fits = {tuple(r["linear_fitted_batch"].values()) for r in results if "linear_fitted_batch" in r}
    return "".join(
        f" The training set has {images} images, fewer than one probe batch of {configured} "
        f"(incomplete batches are dropped): the probe trained at batch {batch}, its learning rate "
        "scaled with it."
        for images, batch, configured in sorted(fits)
    )


def _logreg_legend(results: Sequence[dict]) -> list[str]:
    if not any(agg.is_number(r.get("logreg_acc1")) for r in results):
        return []
    grids = {tuple(r["logreg_sweep"]["l2"]) for r in results if "logreg_sweep" in r}
    chosen = "; ".join(
        f"from {len(grid)} strengths evenly spaced in log scale, "
        f"{tables.cell_text(min(grid), 'logreg_l2')} to {tables.cell_text(max(grid), 'logreg_l2')}"
        for grid in sorted(grids)
    )
    fit = (
        " `logreg_heldout_acc1`: the chosen strength's held-out top-1; `logreg_iterations` and "
        "`logreg_grad_norm`: the refit's L-BFGS iterations and the largest absolute entry of its "
        f"objective's gradient (tolerance {GRADIENT_TOLERANCE:g}, at most {MAX_ITERATIONS} "
        "iterations); `logreg_balanced_acc1` (shown where it differs): the val top-1 averaged over "
        "classes. Each `result.json`'s `logreg_sweep` holds each strength's held-out top-1 and fit."
    )
    return [
        f"- `logreg_acc1`: {PROBE_WORDS['logreg_acc1']}: multinomial logistic regression on the "
        "eval-transformed backbone features, fitted to convergence by full-batch L-BFGS on "
        "standardised features, its L2 strength (`logreg_l2`) chosen "
        f"{chosen or 'from a grid these results do not record (they predate `logreg_sweep`)'} "
        f"by the top-1 on every {HELD_OUT_EVERY}th training image of each class, held out, "
        "then refitted on the whole training set (CLIP paper, Appendix A.3); val split."
        + (fit if grids else "")
    ]


def _legend(spec: Spec, results: Sequence[dict]) -> list[str]:
    settings, declared = spec.evaluation, []
    for column in tables.result_columns(results):  # the representations methods declare
        suffix = next((s for s in REPRESENTATION_MEASURES if column.endswith(s)), None)
        name = column[: -len(suffix)] if suffix else None
        if column not in tables.RESULT_COLUMNS and suffix and name not in declared:
            declared.append(name)
    return [
        f"- `linear_acc1`/`linear_loss`: solo-learn LinearModel on the frozen backbone, val split "
        f"(`{spec.linear.config_name}` + {list(spec.linear.overrides)}).{_fitted_batch(results)}",
        *_logreg_legend(results),
        f"- `knn_acc1`: WeightedKNNClassifier (k={settings.knn_k}, T={settings.knn_temperature}, "
        f"{settings.knn_distance}), train bank -> val, eval transform.",
        f"- `rankme`: RankMe of the features of the first {settings.rankme_samples} val images "
        "(uncentred). "
        f"`lidar`: LiDAR on {settings.lidar_samples} val images x {settings.lidar_views} augmented "
        f"views (delta={settings.lidar_delta}). `sem_*`: the same on the SEM representation of "
        "`_sem` runs (`sem_linear_acc1`: the same probe with `probe: sem`).",
        "- `kmeans_*`: k-means++ / Lloyd (k = number of classes, 5 seeded starts) of the "
        "L2-normalised val features: NMI, AMI, ARI, Hungarian accuracy and permutation-chance NMI. "
        "`codes_*`: NMI, AMI and number of used codes of the argmax code of `cplearn*` runs on the "
        "val split; `embedding_*`: kNN, RankMe and LiDAR of their embedding H (the projector's "
        "output before the codes, `proj_hidden_dim` wide).",
        "- `pretrain_wall_s`: wall time of the pretraining calls (startup included); "
        "`evaluation_wall_s`: of the offline evaluation (a process's first job also prepares the "
        "shared evaluation data); `train_s`, `samples_per_s`, `peak_gpu_mib`: summed / max over "
        "epochs of the training loops (EpochCostLogger).",
        "- Reference rows, evaluated like the runs: `random_init` is the first run's backbone "
        "(same architecture, at each seed) never trained; `raw_pixels` is the normalised image "
        "itself, flattened (`raw_pixels` backbone). A run should beat both: below `raw_pixels` "
        "its features add nothing a linear probe of the pixels does not find.",
        *(
            f"- `{name}_*`: the `{name}` representation its method declares "
            "(`extra_evaluations`), measured like the backbone: kNN, RankMe, LiDAR and, with "
            "probe overrides, the linear probe of features; NMI, AMI and codes used of codes."
            for name in declared
        ),
    ]


def _against(reference: dict, metric: str, runs: Sequence[dict], val_images) -> str:
    if not runs:
        return f"- `{metric}` of `{reference['run']}`: no run was evaluated."
    seeded = reference["run"] in SEEDED_REFERENCES
    other, value = (reference, None) if seeded else (None, reference[metric])
    gaps = [agg.gap(run, metric, other, value=value, val_images=val_images) for run in runs]
    parts = agg.by_sign(gaps, {1: "above it", -1: "below it", 0: "not resolved"})
    shown = tables.mean_cell(reference, metric, set(), set())
    return f"- `{metric}` of `{reference['run']}`: {shown}; {'; '.join(parts)}."


def _verdicts(
    spec: Spec, runs: Sequence[dict], references: Sequence[dict], val_images: Optional[int]
) -> list[str]:
    lines = []
    if spec.seeds is None:
        lines.append(
            "One seed per run (no `seeds` in the spec): no difference below is resolved against "
            "seed noise. Add `seeds: [0, 1, 2]` to tell them apart."
        )
    for metric in ("linear_acc1", "logreg_acc1", "knn_acc1"):
        ranking = agg.rank(runs, metric, val_images)
        if ranking is not None and spec.seeds is not None:
            lines.append(f"- {agg.verdict(ranking)}")
        scored = [r for r in runs if agg.has_value(r, metric)]
        for reference in references:
            if agg.has_value(reference, metric):
                lines.append(_against(reference, metric, scored, val_images))
    return lines


def _without_references(spec: Spec, references: Sequence[dict]) -> list[str]:
    if not spec.reference_rows:
        return [
            "**No reference rows** (`reference_rows: []`): no run is read against the untrained "
            "backbone or the raw pixels.",
            "",
        ]
    missing = [name for name in spec.reference_rows if name not in {r["run"] for r in references}]
    if not missing:
        return []
    names = ", ".join(f"`{name}`" for name in missing)
    return [
        f"**Reference rows missing**: {names} {'has' if len(missing) == 1 else 'have'} no result "
        "here (left out by `only=`, or not run yet): no run is read against "
        f"{'it' if len(missing) == 1 else 'them'}.",
        "",
    ]


def _unfinished(results: Sequence[dict], max_epochs: int) -> list[str]:
    stopped = [r for r in results if r.get("unfinished")]
    if not stopped:
        return []
    jobs = ", ".join(f"{r['run']} seed {r['seed']} ({r['epochs']})" for r in stopped)
    rows, their = ("Its row holds", "its") if len(stopped) == 1 else ("Their rows hold", "their")
    return [
        f"**Unfinished**: {_counted(len(stopped), 'job')} stopped before the evaluation, after "
        f"the epochs in brackets of {max_epochs}: {jobs}. {rows} the pretraining costs and curves "
        f"only; {their} evaluation columns are empty, and `n_seeds` counts only the evaluated "
        "seeds.",
        "",
    ]


def _seeded_tables(
    spec: Spec,
    aggregated: Sequence[dict],
    reference_means: Sequence[dict],
    results: Sequence[dict],
    val_images: Optional[int],
) -> list[str]:
    summary = [*aggregated, *reference_means]
    if not summary:
        return ["No job finished: the failed jobs' logs say why.", ""]
    metrics = agg.ranked_metrics(tables.result_columns(results))
    rankings = {m: agg.rank(aggregated, m, val_images) for m in metrics}
    integer = tables.integer_columns(results)

    def cell(row: dict, column: str) -> str:
        if column == "n_seeds" and row.get("unfinished"):
            return f"{row['n_seeds']} (+{row['unfinished']} unfinished)"
        if column in agg.NOT_AGGREGATED:
            return tables.row_cell(row, column)
        ranking = rankings.get(column)
        best = {ranking.best, *ranking.tied} if ranking else set()
        resolved = set(ranking.resolved) if ranking else set()
        return tables.mean_cell(row, column, best, resolved, column in integer)

    columns = [c for c in tables.shown_columns(summary) if c != "seed"]
    columns.insert(columns.index("method") + 1, "n_seeds")
    lines = [f"## Mean ± standard deviation over {_counted(len(spec.seeds), 'seed')}", ""]
    lines += tables.grouped_tables(summary, columns, cell)
    floor = (
        f"two standard errors of the accuracy on the {val_images:,} val images, "
        f"200 sqrt(p (1 - p) / n) points at the two means' average p "
        f"({100 / math.sqrt(val_images):.2f} at p = 0.5)"
        if val_images
        else "which the val images, not counted here, do not give: such gaps are not resolved"
    )
    few = any(1 < r["n_seeds"] < agg.MIN_SEEDS for r in summary)
    lines += [
        "**Bold**: the best run of a ranked column (highest mean). "
        f"{tables.RESOLVED_MARK}: below the best by more than two pooled standard deviations of "
        "the seeds. Every other difference to "
        "the best is within two pooled standard deviations: this comparison does not resolve it. "
        "`random_init` is evaluated at every seed; `raw_pixels` once (no seed changes it)."
        + (FEW_SEEDS.format(floor=floor) if few else ""),
        "",
        "## Per seed",
        "",
    ]
    return lines + tables.grouped_tables(results, tables.shown_columns(results), tables.row_cell)


def write_report(
    spec: Spec,
    results: Sequence[dict],
    out: Path,
    left_out: Sequence[str] = (),
    budgets: Optional[dict[str, plan.RunBudget]] = None,
) -> Path:
    """Write results.csv, the plots, the learning curves and report.md; return report.md's path."""
    references = [r for r in results if r["run"] in REFERENCE_ROWS]
    runs = [r for r in results if r["run"] not in REFERENCE_ROWS]
    seeded = spec.seeds is not None
    aggregated = agg.aggregate(runs) if seeded else []
    reference_means = agg.aggregate(references) if seeded else references
    rows = [*runs, *aggregated, *references, *reference_means] if seeded else list(results)
    tables.write_results_csv(rows, out / "results.csv", seeds=seeded)
    plotted = curves.plots_available()
    if plotted:
        curves.plot_spectra(results, out / "spectra.png")
        curves.plot_curves(results, out, out / "curves.png")
    budget, epochs = spec.budget, spec.budget.max_epochs
    limit = budget.limit_train_batches
    limit = f", limit_train_batches {limit}" if limit else ""
    seeds = f"seeds {list(spec.seeds)}" if seeded else "each config's own seed"
    budgets = budgets or {}
    trained = {run: b.trained() for run, b in budgets.items()}
    budgets = {run: b for run, b in budgets.items() if run in {r["run"] for r in runs}}
    same = all(b.epochs == budget.max_epochs for b in budgets.values())
    whose = "every run" if same else "`max_epochs`, the most a run trains; each run's below"
    val_images = plan.count_val_images(spec)
    claims = claim_lines(spec, runs, out, trained, val_images)
    notes = out / NOTES_FILE
    lines = [
        f"# Comparison: {spec.name}",
        "",
        *_without_references(spec, references),
        *(["Claims checked against the seeds:", *claims, ""] if claims else []),
        *([notes.read_text(encoding="utf-8").rstrip("\n"), ""] if notes.is_file() else []),
        *_unfinished(results, budget.max_epochs),
        *([f"**Partial**: {PARTIAL}{', '.join(left_out)}.", ""] if left_out else []),
        f"Data: `{spec.data.dataset}` train `{spec.data.train_path}`, val `{spec.data.val_path}`, "
        f"`{FORMAT_KEY}: {spec.data.format}`. "
        f"Budget ({whose}): {_counted(budget.max_epochs, 'epoch')}, batch "
        f"{budget.batch_size}{limit}; {seeds}. Checkpoints every "
        f"{_counted(plan.checkpoint_interval(budget, epochs), 'epoch')} and the last; online probe "
        f"validated every {_counted(plan.validation_interval(budget, epochs), 'epoch')}. "
        f"Trainer overrides: {list(spec.trainer)}.",
        "",
        *([plan.budget_line(spec, budgets), ""] if budgets else []),
        *_verdicts(spec, aggregated if seeded else runs, reference_means, val_images),
        "",
    ]
    if seeded:
        lines += _seeded_tables(spec, aggregated, reference_means, results, val_images)
    else:
        columns = [c for c in tables.shown_columns(results) if c != "seed"]
        lines += ["## Results", "", *tables.grouped_tables(results, columns, tables.row_cell)]
    lines += curves.learning_curve_lines(spec, results, out, plotted)
    lines += ["## Columns", "", *_legend(spec, results), "", *run_record_lines(results, out)]
    plots = ["![singular-value spectra](spectra.png)", "", "![pretraining curves](curves.png)"]
    lines += [*(plots if plotted else [NO_PLOTS]), ""]
    report = out / "report.md"
    write_text_atomic(report, "\n".join(lines))  # a kill keeps the previous report whole
    return report
