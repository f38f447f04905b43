"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

- :mod:`~solo_diet.cli.compare.spec`: the spec's defaults, loading and checks;
- :mod:`~solo_diet.cli.compare.jobs`: the runs, and the jobs (one per run and seed, one per
  reference row), each in its own folder;
- :mod:`~solo_diet.cli.compare.fingerprints`: what identifies a job's pretraining, evaluation and
  data, so finished work is kept and changed work redone;
- :mod:`~solo_diet.cli.compare.runner`: each job pretrained with ``run_pretrain`` (a finished job
  is not repeated, an interrupted one resumes from its last checkpoint), then evaluated, in this
  process or side by side in worker processes (:mod:`~solo_diet.cli.compare.fanout`,
  :mod:`~solo_diet.cli.compare.worker`);
- :mod:`~solo_diet.cli.compare.evaluate`: the evaluation of one checkpoint (linear probe, kNN,
  RankMe, LiDAR, k-means, and what the method's contract adds, e.g. the SEM representation);
- :mod:`~solo_diet.cli.compare.report`: ``results.csv``, PNG plots and ``report.md``, with mean ±
  std over seeds (:mod:`~solo_diet.cli.compare.aggregate`) and where and when the jobs ran
  (:mod:`~solo_diet.cli.compare.record`).

The spec format is in ``docs/compare.md``.
"""

from solo_diet.cli.compare.jobs import parse_runs
from solo_diet.cli.compare.runner import run_compare
from solo_diet.cli.compare.spec import load_spec

__all__ = ["load_spec", "parse_runs", "run_compare"]
