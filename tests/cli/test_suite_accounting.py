"""The count of skipped solo-learn tests that tests/conftest.py prints is exact, or a lower bound
where it says "at least", for this tree."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest

from tests._solo import count_tests, requires_solo

ROOT = Path(__file__).resolve().parents[2]


def module_guarded_files() -> list[Path]:
    return sorted(
        p for p in (ROOT / "tests").rglob("test_*.py") if "skip_without_solo()" in p.read_text()
    )


@pytest.mark.solo
@requires_solo()
def test_source_count_equals_pytests_collection():
    files = module_guarded_files()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *map(str, files),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    collected = collections.Counter(
        line.split("::")[0] for line in done.stdout.splitlines() if "::" in line
    )
    assert collected, done.stdout[-2000:] + done.stderr[-2000:]
    for path in files:
        count, exact = count_tests(path)
        found = collected[str(path.relative_to(ROOT))]
        # a parametrize list computed at import (e.g. solo-learn's registry) is counted once: the
        # printed line then says "at least"
        assert count == found if exact else 0 < count <= found, (path, count, exact, found)
