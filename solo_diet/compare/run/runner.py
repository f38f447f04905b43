"""``run_spec``: every job of a comparison, here or in worker processes, then the report."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping, Optional, Sequence

from omegaconf import ListConfig, OmegaConf

from solo_diet.compare.evaluate.checkpoint import SharedEvaluator
from solo_diet.compare.plan import jobs as plan
from solo_diet.compare.plan.budgets import count_images
from solo_diet.compare.plan.jobs import Job
from solo_diet.compare.report.markdown import write_report
from solo_diet.compare.run import record
from solo_diet.compare.run.job import LOCK_FILE, result_standing, run_job, stop_orphans
from solo_diet.compare.run.record import progress, read_json, read_result
from solo_diet.compare.run.sharing import PLAN_PREFIX, WORKER, Fleet, fleet_of
from solo_diet.compare.run.worker import save_plan
from solo_diet.compare.spec.load import SpecSource, load_spec
from solo_diet.compare.spec.settings import REFERENCE_ROWS, Spec
from solo_diet.core.atomic import remove_stale_temporaries, running, write_text_atomic
from solo_diet.core.errors import ConfigError
from solo_diet.core.lock import folder_lock
from solo_diet.launch import launch_checks
from solo_diet.launch.callbacks import OverallProgress
from solo_diet.launch.errors import disk_full_named
from solo_diet.launch.nodes import check_one_node
from solo_diet.methods.contract import method_contract, parse_method_kwargs


class JobsFailed(RuntimeError):
    """Some jobs failed (the report holds the others); the message names each job and its log."""


@dataclass(frozen=True)
class CompareResults:
    """A comparison after :func:`run_spec` (docs/compare.md, "From Python")."""

    spec: Spec
    report: Path
    records: tuple[dict[str, Any], ...]
    left_out: tuple[str, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    started: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def of_run(self, run: str) -> list[dict[str, Any]]:
        """The records of ``run`` (a run's or reference row's name), one per seed."""
        return [result for result in self.records if result["run"] == run]

    def failure_message(self) -> str:
        return (
            f"{len(self.failures)} of the {self.started} jobs started failed: "
            f"{'; '.join(self.failures.values())}. The "
            "report holds the others; rerun the same command to retry the failed ones."
        )

    def raise_for_failures(self) -> None:
        if self.failures:
            raise JobsFailed(self.failure_message())


class JobsProgress:
    """The overall progress line: a job weighs its epochs plus one evaluation (2 until measured)."""

    def __init__(self, jobs: Sequence[Job], **line: Any) -> None:
        self.jobs, self.evaluation_epochs, self.ended = list(jobs), None, []
        self.overall = OverallProgress("compare", self._weights(2.0), **line)

    def _weights(self, evaluation: float) -> list[float]:
        return [evaluation + (job.budget.epochs if job.budget else 0) for job in self.jobs]

    def _measure(self, job: Job) -> None:
        result = read_json(job.run_dir / "result.json")
        pretrain_s, evaluation_s = result.get("pretrain_wall_s"), result.get("evaluation_wall_s")
        if self.evaluation_epochs is None and job.budget and pretrain_s and evaluation_s:
            self.evaluation_epochs = evaluation_s * job.budget.epochs / pretrain_s
            self.overall.weights = self._weights(self.evaluation_epochs)
            self.overall.after_first = None  # the rate measured again, in these weights

    def step(self, position: int) -> None:
        """The line as job ``position`` (1-based) starts, the jobs before it ended."""
        if position > 1:
            self._measure(self.jobs[position - 2])
        job = self.jobs[position - 1]
        self.overall.step(position, job.label + ("" if job.reference else f": {job.cfg.method}"))

    def say(self, message: str) -> None:
        """``progress``, then the overall line after a line that says a job ended."""
        progress(message)
        label = message.partition(": ")[0]
        ended = [k for k, job in enumerate(self.jobs, 1) if job.label == label]
        if ended and ended[0] not in self.ended:
            self._measure(self.jobs[ended[0] - 1])
            self.ended.append(ended[0])
            self.overall.ended(self.ended, "jobs ended")


def _run_here(spec: Spec, jobs: Sequence[Job], eval_fingerprint: str) -> dict[str, str]:
    """Every job in this process, one after another; returns {failed job's key: what failed}."""
    shared_eval, failures, overall = SharedEvaluator(), {}, JobsProgress(jobs)
    for position, job in enumerate(jobs, 1):
        overall.step(position)
        try:
            run_job(spec, job, shared_eval, eval_fingerprint)
        except Exception as err:  # noqa: BLE001 - reported, the other jobs go on
            traceback.print_exc()
            progress(f"{job.label}: FAILED ({type(err).__name__}: {err})")
            failures[job.key] = f"{job.label} ({type(err).__name__}: {err})"
    return failures


def _run_in_processes(jobs: Sequence[Job], fleet: Fleet, reuse: bool) -> dict[str, str]:
    """Every job in a process of its own GPUs, longest first (``reuse``: in reusable workers);
    {failed job's key: what failed}."""
    from solo_diet.compare.run.fanout import Task, run_tasks

    for job in jobs:  # a job in its own process sees only its GPUs, numbered from 0
        devices = OmegaConf.select(job.cfg, "devices")
        if isinstance(devices, ListConfig) and list(devices) != list(range(len(devices))):
            raise ConfigError(
                f"{job.label}: `devices={list(devices)}`; with jobs in their own processes each "
                f"sees only its own GPUs: write a count (devices={len(devices)})."
            )
    jobs, plan_file = plan.longest_first(jobs), str(fleet.plan_file)
    tasks = [
        Task(
            label=job.label,
            argv=(*WORKER, plan_file, job.key),
            log_path=job.run_dir / "job.log",
            gpus=job.gpus() if fleet.gpus else 0,
            request=job.key if reuse and job.gpus() <= 1 else None,
        )
        for job in jobs
    ]
    statuses = run_tasks(
        tasks,
        fleet.workers,
        fleet.gpus,
        JobsProgress(jobs).say,
        jobs_per_gpu=fleet.sharing.jobs_per_gpu,
        serve_argv=(*WORKER, "--serve", plan_file) if reuse else None,
        threads=fleet.threads,
        started=fleet.started,
        retired=fleet.retired,
    )
    return {
        job.key: f"{job.label} (exit status {status}, log: {task.log_path})"
        for job, task, status in zip(jobs, tasks, statuses)
        if status != 0
    }


def _check_before_any_job(spec: Spec, jobs: Sequence[Job], out: Path) -> None:
    """What the launchers refuse, for the probe and every job, before the first job starts."""
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod
    from solo.methods.linear import LinearModel

    probe = plan.compose_linear(spec, out / "checkpoint-placeholder.ckpt", out)
    checks = [("`linear`", probe, LinearModel)]
    checks += [(job.label, job.cfg, METHODS.get(job.cfg.method, BaseMethod)) for job in jobs]
    for label, cfg, model_cls in checks:
        try:
            launch_checks.check_cfg_before_parse(cfg)
            launch_checks.check_solo_learn_choices(cfg, model_cls)
            launch_checks.check_accelerator_present(cfg)
            check_one_node(cfg)
            # method_kwargs by their fields, N a placeholder where the job fills it from the data
            kwargs = cfg.copy()
            filled = OmegaConf.select(kwargs, "method_kwargs.num_samples") not in (None, "None")
            if method_contract(model_cls).uses_sample_indexes and not filled:
                OmegaConf.update(kwargs, "method_kwargs.num_samples", 1, force_add=True)
            parse_method_kwargs(kwargs, model_cls)
        except ConfigError as err:
            raise ConfigError(f"{label}: {err}") from None


def _report_of_finished(
    spec: Spec, jobs: Sequence[Job], report_only: bool = False, failed: Collection[str] = ()
) -> CompareResults:
    """The report of the ``jobs`` with a ``result.json`` of their recipe, naming the others."""
    results, left_out, stale, out = [], [], False, spec.output_dir
    for job in jobs:
        result = read_result(job.run_dir / "result.json")
        if job.key in failed:
            left_out.append(f"{job.label} (failed)")
        elif "recipe" in result and result["recipe"] != plan.recipe_fingerprint(job.cfg):
            left_out.append(f"{job.label} (stale: trained with another config)")
            stale = True
        elif result:
            results.append(result)
        elif report_only and job.reference is None and (job.run_dir / record.EPOCHS_FILE).is_file():
            # trained but never evaluated: its costs and curves, marked unfinished
            row = {"run": job.name, "seed": job.cfg_seed, "method": job.cfg.method, "job": job.key}
            costs = record.pretrain_costs(job.run_dir)
            del costs["pretrain_wall_s"]  # its pretraining call never returned
            results.append(row | costs | {"unfinished": True})
        else:
            left_out.append(job.label)
    fresh = [r for r in results if r["run"] not in REFERENCE_ROWS and not r.get("unfinished")]
    if report_only and stale and not fresh:
        raise ConfigError(
            f"--report-only: every finished run in {out} was trained with another config "
            "(budget, trainer or data settings) than this spec, so the report was kept; "
            f"rebuild it from their spec: solo-diet compare {out / 'spec.yaml'} --report-only"
        )
    if left_out:
        progress(f"{len(left_out)} of {len(jobs)} jobs have no result yet: the report names them")
    budgets = {job.name: job.budget for job in jobs if job.budget is not None}
    report = write_report(spec, results, out, left_out, budgets)
    progress(f"report: {report}")
    return CompareResults(spec, report, tuple(results), tuple(left_out))


def run_spec(
    spec: SpecSource,
    overrides: Sequence[str] = (),
    report_only: bool = False,
    *,
    loaded: Optional[Spec] = None,
    fleet: Optional[Fleet] = None,
) -> CompareResults:
    """Run (or finish) a comparison of a spec plus dot-list ``overrides``, then write its report;
    ``loaded`` and ``fleet``: the spec and started workers of a caller (``solo-diet compare``)."""
    import solo_diet

    solo_diet.register()
    plan.data_signature.cache_clear()  # the data may have changed since this process last looked
    count_images.cache_clear()  # and its image count
    spec_path, spec = spec, loaded or load_spec(spec, overrides)
    out, budget = spec.output_dir, spec.budget
    if report_only:
        if not out.is_dir():
            raise ConfigError(f"--report-only: `output_dir` {out} does not exist: nothing ran.")
        return _report_of_finished(spec, plan.plan_jobs(spec), report_only=True)
    with contextlib.ExitStack() as held:
        fleet = fleet or held.enter_context(fleet_of(spec, start_workers=True))
        jobs = plan.plan_jobs(spec)
        chosen = [job for job in jobs if spec.only is None or job.name in spec.only]
        _check_before_any_job(spec, chosen, out)
        out.mkdir(parents=True, exist_ok=True)
        what, fix = f"`output_dir` {out}", "pass another output_dir"
        lock = folder_lock(out / LOCK_FILE, "compare", what, fix, progress)
        with disk_full_named(out / LOCK_FILE):  # taking the lock writes its holder: a first write
            held.enter_context(lock)  # one comparison per folder
        stop_orphans([job.run_dir for job in jobs], say=progress)
        remove_stale_temporaries(out)  # what killed processes left, and dead comparisons' plans
        for folder in Path(tempfile.gettempdir()).glob(f"{PLAN_PREFIX}*"):
            pid = folder.name[len(PLAN_PREFIX) :].split("-")[0]
            if pid.isdigit() and not running(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
        write_text_atomic(out / "spec.yaml", spec.resolved)  # the resolved spec, as a record
        # as commands.txt names the spec: its file, or the resolved copy written in `out`
        named = spec_path if isinstance(spec_path, (str, Path)) else out / "spec.yaml"
        record.note_command(out, named, overrides, len(fleet.gpus))
        in_processes = fleet.workers > 1 or any(job.gpus() > 1 for job in chosen)
        processes = " in separate processes, " + (
            "each running job after job" if spec.parallel.reuse_workers else "a fresh one per job"
        )
        seeds = f"seeds {list(spec.seeds)}" if spec.seeds is not None else "each run config's seed"
        only = f", running the {len(chosen)} of {list(spec.only)}" if spec.only is not None else ""
        amount = f"{budget.samples:,} samples" if budget.samples else f"{budget.max_epochs} epochs"
        progress(
            f"{spec.name}: {len(jobs)} jobs ({len(spec.runs)} runs, {seeds}, reference rows "
            f"{list(spec.reference_rows)}){only}, {amount} at batch {budget.batch_size}, "
            f"{fleet.workers} worker(s){processes if in_processes else ''}; {fleet.sharing.why} "
            f"-> {out}"
        )
        eval_fingerprint = plan.evaluation_fingerprint(spec)
        to_run = []
        for job in chosen:  # a job whose result stands is named, not started
            standing = result_standing(spec, job, eval_fingerprint)
            if standing:
                progress(f"{job.label}: {standing}")
            else:
                to_run.append(job)
        if in_processes:  # the workers' jobs, planned here, in the fleet's private folder
            save_plan(fleet.plan_file, spec, to_run, eval_fingerprint)
            failures = _run_in_processes(to_run, fleet, spec.parallel.reuse_workers)
        else:
            failures = _run_here(spec, to_run, eval_fingerprint)
        results = _report_of_finished(spec, jobs, failed=failures)
        return dataclasses.replace(results, failures=failures, started=len(to_run))


def run_compare(
    spec_path: SpecSource, overrides: Sequence[str] = (), report_only: bool = False
) -> Path:
    """:func:`run_spec`, returning report.md's path; raises :class:`JobsFailed` if a job failed."""
    results = run_spec(spec_path, overrides, report_only)
    results.raise_for_failures()
    return results.report
