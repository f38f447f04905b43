"""What :func:`~solo_diet.compare.run_spec` returns: the records of a comparison's jobs, where the
report went and which jobs failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig


class JobsFailed(RuntimeError):
    """Some jobs failed (the report holds the others); the message names each job and its log."""


@dataclass(frozen=True)
class CompareResults:
    """A comparison after :func:`~solo_diet.compare.run_spec`.

    Attributes:
        spec: the resolved spec the jobs ran with (also ``<output_dir>/spec.yaml``).
        report: ``report.md``; ``results.csv`` and the plots are beside it.
        records: one per job with a result, in the spec's order (every run once per seed, then the
            reference rows): its ``result.json`` (``run``, ``seed``, ``method``, the metrics and
            costs), the per-seed rows of ``results.csv``. With ``report_only`` a run's job stopped
            before its evaluation is a record marked ``unfinished`` (its costs and curves).
        left_out: the labels of the spec's jobs without a result, as the report names them.
        failures: {failed job's key: the job and what failed (or its log)}, empty when none did.
        started: how many jobs this call started (those whose result stood were not).
    """

    spec: DictConfig
    report: Path
    records: tuple[dict[str, Any], ...]
    left_out: tuple[str, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    started: int = 0

    @property
    def output_dir(self) -> Path:
        return self.report.parent

    @property
    def ok(self) -> bool:
        """Whether every job started in this call finished."""
        return not self.failures

    def of_run(self, run: str) -> list[dict[str, Any]]:
        """The records of ``run`` (a run's or reference row's name), one per seed."""
        return [record for record in self.records if record["run"] == run]

    def failure_message(self) -> str:
        """One line: how many of the started jobs failed, each with what failed."""
        return (
            f"{len(self.failures)} of the {self.started} jobs started failed: "
            f"{'; '.join(self.failures.values())}. The "
            "report holds the others; rerun the same command to retry the failed ones."
        )

    def raise_for_failures(self) -> None:
        """Raise :class:`JobsFailed` with :meth:`failure_message` when some job failed."""
        if self.failures:
            raise JobsFailed(self.failure_message())
