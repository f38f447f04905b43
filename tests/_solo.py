"""Guards for tests that need solo-learn main, and the count of those a run without it skips."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Optional

import pytest

from solo_diet._host import INSTALL_HINT, solo_problem


def _skip_reason() -> str:
    return f"needs solo-learn main: {solo_problem()} {INSTALL_HINT.splitlines()[0]}"


def skip_without_solo() -> None:
    """Skip the calling test module, saying why, when solo-learn main is not usable here (the
    module then reports as one skip; ``tests/conftest.py`` prints how many tests it held)."""
    if solo_problem() is not None:
        pytest.skip(_skip_reason(), allow_module_level=True)


def requires_solo() -> pytest.MarkDecorator:
    """Per-test guard (one skip per test), for modules that import solo-learn only inside tests."""
    missing = solo_problem() is not None
    return pytest.mark.skipif(missing, reason=_skip_reason() if missing else "solo-learn is usable")


def _literal_length(node: ast.AST, names: dict[str, ast.AST]) -> Optional[int]:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("list", "tuple")
    ):
        node = node.args[0] if node.args else node
    if isinstance(node, ast.Name):
        node = names.get(node.id, node)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return len(node.elts)
    if isinstance(node, ast.Dict):
        return len(node.keys)
    return None


def _cases(function: ast.FunctionDef, names: dict[str, ast.AST]) -> Optional[int]:
    """Number of test items one test function yields (the product of its parametrize lengths)."""
    lengths = []
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith(
            "mark.parametrize"
        ):
            values = decorator.args[1] if len(decorator.args) > 1 else None
            lengths.append(None if values is None else _literal_length(values, names))
    return None if None in lengths else math.prod(lengths)


def count_tests(path: Path) -> tuple[int, bool]:
    """``(number of tests in a module, exact)`` read from its source without importing it; inexact
    when a parametrize list is not a literal (then each such test counts once)."""
    tree = ast.parse(Path(path).read_text())
    names = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.startswith("Test")):
        functions += [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    counts = [_cases(f, names) for f in functions if f.name.startswith("test")]
    return sum(1 if c is None else c for c in counts), None not in counts
