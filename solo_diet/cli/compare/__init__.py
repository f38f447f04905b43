"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

- :mod:`~solo_diet.cli.compare.spec`: the spec's defaults, loading and checks;
- :mod:`~solo_diet.cli.compare.runner`: one job per run, each pretrained with ``run_pretrain`` in
  its own folder (a finished job is not repeated, an interrupted one resumes from its last epoch
  checkpoint), then evaluated;
- :mod:`~solo_diet.cli.compare.evaluate`: the evaluation of one checkpoint (linear probe, kNN,
  RankMe, LiDAR, k-means, and what the method's contract adds, e.g. the SEM representation);
- :mod:`~solo_diet.cli.compare.report`: ``results.csv``, PNG plots and ``report.md``.

The spec format is in ``docs/compare.md``.
"""

from solo_diet.cli.compare.runner import run_compare
from solo_diet.cli.compare.spec import load_spec, parse_runs

__all__ = ["load_spec", "parse_runs", "run_compare"]
