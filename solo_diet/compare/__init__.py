"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

Start at :func:`~solo_diet.compare.runner.run_spec`; the format and outputs are in
``docs/compare.md``. Modules: the spec, loaded once into a typed :class:`Spec` (``spec``), its
jobs planned once (``jobs``), where they run (``runner``), one job (``job``) and its evaluation
(``evaluate``), then the report (``report``).
"""

from solo_diet.compare.runner import CompareResults, JobsFailed, run_compare, run_spec
from solo_diet.compare.spec import load_spec
from solo_diet.compare.spec_checks import Spec
