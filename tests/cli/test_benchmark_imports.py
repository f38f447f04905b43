"""Every ``from solo_diet... import name`` in ``benchmarks/`` resolves, so a moved or removed name
breaks a test here rather than a benchmark on a lent GPU."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests._helpers import requires_solo

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _imports() -> list[tuple[str, str, str]]:
    found = []
    for script in sorted(BENCHMARKS.rglob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("solo_diet"):
                where = f"{script.name}:{node.lineno}"
                found += [(where, node.module, alias.name) for alias in node.names]
    return found


@requires_solo()
@pytest.mark.parametrize("where, module, name", _imports())
def test_benchmark_import_resolves(where, module, name):
    imported = importlib.import_module(module)
    if not hasattr(imported, name):
        importlib.import_module(f"{module}.{name}")  # a submodule imported by name
