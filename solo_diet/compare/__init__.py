"""``solo-diet compare``: several methods, one data set, one budget, one evaluation, one report.

Its names load on first use, so ``solo_diet.compare.run.sharing`` and the spec loader import without
torch, Lightning or solo-learn (a comparison starts its workers before its own heavy imports)."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CompareResults": "solo_diet.compare.run.runner",
    "JobsFailed": "solo_diet.compare.run.runner",
    "run_compare": "solo_diet.compare.run.runner",
    "run_spec": "solo_diet.compare.run.runner",
    "load_spec": "solo_diet.compare.spec.load",
    "Spec": "solo_diet.compare.spec.settings",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
