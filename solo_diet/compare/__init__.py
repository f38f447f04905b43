"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report."""

from solo_diet.compare.run.runner import CompareResults, JobsFailed, run_compare, run_spec
from solo_diet.compare.spec.load import load_spec
from solo_diet.compare.spec.settings import Spec
