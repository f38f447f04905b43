"""Without solo-learn each solo-learn test module skips as one: say how many tests that hid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._solo import count_tests, solo_problem

_SKIPPED_MODULES: list[Path] = []


def pytest_collectreport(report) -> None:
    path = Path(str(report.fspath))
    if report.skipped and path.suffix == ".py" and "skip_without_solo()" in path.read_text():
        _SKIPPED_MODULES.append(path)


def pytest_terminal_summary(terminalreporter) -> None:
    if not _SKIPPED_MODULES:
        return
    counts = [count_tests(path) for path in _SKIPPED_MODULES]
    total = sum(n for n, _ in counts)
    at_least = "" if all(exact for _, exact in counts) else "at least "
    terminalreporter.write_line(
        f"{at_least}{total} solo-learn tests not run ({len(counts)} modules, each reported as one "
        f"skip): {solo_problem()}"
    )


@pytest.fixture(autouse=True, scope="session")
def _decode_cache_in_a_temporary_folder(tmp_path_factory):
    """The suite never writes the user's decode cache (solo_diet.data.decode_cache); subprocesses
    inherit the variable."""
    os.environ["SOLO_DIET_CACHE"] = str(tmp_path_factory.mktemp("decode-cache"))
