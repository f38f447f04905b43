"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

Start at :func:`~solo_diet.compare.runner.run_spec` (``solo-diet compare`` is a few lines over it),
which returns :class:`~solo_diet.compare.runner.CompareResults`. The spec format and the outputs
are in ``docs/compare.md``; each module's docstring says its part: the spec
(:mod:`~solo_diet.compare.spec`), its runs and jobs (:mod:`~solo_diet.compare.jobs`), where they
run (:mod:`~solo_diet.compare.runner`), one job (:mod:`~solo_diet.compare.job`) and its
evaluation (:mod:`~solo_diet.compare.evaluate`), then the report (:mod:`~solo_diet.compare.report`).
"""

from solo_diet.compare.jobs import parse_runs
from solo_diet.compare.runner import CompareResults, JobsFailed, run_compare, run_spec
from solo_diet.compare.spec import load_spec
