"""The suite's shared helpers: test modules import these (and conftest's fixtures), never each
other. Modules that need solo-learn main start with
``pytest.importorskip("solo.methods", reason=NEEDS_SOLO)``: without it each reports as one skip
with that reason (``pytest -rs`` lists them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solo_diet.host import INSTALL_HINT, solo_problem

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
NEEDS_SOLO = f"needs solo-learn main: {INSTALL_HINT.splitlines()[0]}"


def requires_solo() -> pytest.MarkDecorator:
    """Per-test guard (one skip per test), for modules that import solo-learn only inside tests."""
    missing = solo_problem() is not None
    reason = f"{solo_problem()} {NEEDS_SOLO}" if missing else "solo-learn is usable"
    return pytest.mark.skipif(missing, reason=reason)
