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
    """A comparison after :func:`~solo_diet.compare.run_spec` (docs/compare.md, "From Python"):
    the resolved ``spec``, the ``report``'s path, the ``records`` (one ``result.json`` per job
    with a result, in the spec's order; with ``report_only`` also the ``unfinished`` ones), the
    labels of the jobs ``left_out``, the ``failures`` {job key: what failed} and how many jobs
    this call ``started``."""

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
