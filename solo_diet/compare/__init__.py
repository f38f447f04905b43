"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

Start at :func:`~solo_diet.compare.runner.run_spec` (``solo-diet compare`` is a few lines over it):
``run_spec(spec, overrides) -> CompareResults`` (:mod:`~solo_diet.compare.results`: the records
of every run and seed, the report's path, the failed jobs). The spec format is in
``docs/compare.md``. The modules, in the order a comparison uses them:

- :mod:`~solo_diet.compare.spec`: the spec's defaults, loading and checks
  (:mod:`~solo_diet.compare.spec_checks`);
- :mod:`~solo_diet.compare.jobs`: the runs, and the jobs (one per run and seed, one per
  reference row), each in its own folder;
- :mod:`~solo_diet.compare.fingerprints`: what identifies a job's pretraining, evaluation and
  data, so finished work is kept and changed work redone;
- :mod:`~solo_diet.compare.runner`: where and when the jobs run, in this process or side by
  side in worker processes (:mod:`~solo_diet.compare.fanout`,
  :mod:`~solo_diet.compare.worker`);
- :mod:`~solo_diet.compare.job`: one job, pretrained once with ``run_pretrain`` (a finished job
  is not repeated, an interrupted one resumes from its last checkpoint), then evaluated;
- :mod:`~solo_diet.compare.evaluate`: the evaluation of one checkpoint (linear probe, kNN,
  RankMe, LiDAR, k-means, and what the method's contract adds, e.g. the SEM representation);
- :mod:`~solo_diet.compare.report`: ``results.csv``, the PNG plots
  (:mod:`~solo_diet.compare.plots`) and ``report.md``, with mean ± std over seeds and the
  marks of resolved differences (:mod:`~solo_diet.compare.aggregate`), the spec's claims
  checked against the results (:mod:`~solo_diet.compare.claims`), and where, when and at what
  cost the jobs ran (:mod:`~solo_diet.compare.record`);
- :mod:`~solo_diet.compare.curves`: the learning curves, linear probe and kNN of backbone
  snapshots saved during pretraining (:mod:`~solo_diet.compare.snapshots`), against epochs and
  samples seen (:mod:`~solo_diet.compare.compute`), gathered over seeds in the report
  (:mod:`~solo_diet.compare.curves_report`).

:mod:`~solo_diet.compare._files` holds the small JSON and progress helpers they share.
"""

from solo_diet.compare.jobs import parse_runs
from solo_diet.compare.results import CompareResults, JobsFailed
from solo_diet.compare.runner import run_compare, run_spec
from solo_diet.compare.spec import load_spec

__all__ = ["CompareResults", "JobsFailed", "load_spec", "parse_runs", "run_compare", "run_spec"]
