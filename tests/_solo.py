"""Module-level guard for tests that need solo-learn main."""

from __future__ import annotations

import pytest

from solo_diet._host import INSTALL_HINT, solo_problem


def skip_without_solo() -> None:
    """Skip the calling test module, saying why, when solo-learn main is not usable here."""
    problem = solo_problem()
    if problem is not None:
        pytest.skip(
            f"needs solo-learn main: {problem} {INSTALL_HINT.splitlines()[0]}", allow_module_level=True
        )
