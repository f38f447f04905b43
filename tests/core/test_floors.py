"""The floors: imports only go down. From the top: ``solo_diet/cli`` (thin commands),
``solo_diet/compare`` (the comparison runner), ``solo_diet/launch`` (settings, data paths and the
runs that pretrain, linear and compare share), ``solo_diet/methods`` (solo-learn adapters) and the
core (everything else), which imports neither solo-learn nor Lightning: checked on the source, lazy
imports included. The core and
the modules of its tests then import with solo-learn and Lightning made unimportable, so a CI
without solo-learn collects every core test (a core test may still compare against solo-learn
inside a test marked ``requires_solo``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests._helpers.core import FLOORS, PACKAGE, REPO, _floor

HOST_LIBRARIES = ("solo", "lightning", "pytorch_lightning", "hydra")


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _core_modules() -> list[str]:
    """Dotted names of every core module and package."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if _floor(path) == "core":
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_imports_only_go_down() -> None:
    packages = tuple(f"solo_diet.{floor}" for floor in FLOORS)
    above = {floor: packages[:i] for i, floor in enumerate(FLOORS)}
    above["core"] = HOST_LIBRARIES + packages
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue  # importing the package registers the methods when solo-learn is there
        floor = _floor(path)
        wrong += [
            f"{path.relative_to(REPO)} ({floor}) imports {name}"
            for name in sorted(_imported(path))
            if _within(name, above[floor])
        ]
    assert not wrong, "\n".join(wrong)


def test_core_and_its_tests_import_without_solo_learn_or_lightning() -> None:
    core = _core_modules()
    tests = [f"tests.core.{p.stem}" for p in sorted((REPO / "tests" / "core").glob("test_*.py"))]
    script = (
        "import importlib, sys\n"
        f"for name in {HOST_LIBRARIES!r}:\n"
        "    sys.modules[name] = None  # import raises ImportError, find_spec says absent\n"
        f"for module in {core + tests!r}:\n"
        "    importlib.import_module(module)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
