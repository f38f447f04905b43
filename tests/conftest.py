"""The suite's two tiers. ``python -m pytest`` runs the fast tier; ``--runslow`` runs every test.

A test is slow when it, one of its fixtures, or a helper of the suite it calls (followed through
the functions and classes of ``tests``) names one of :data:`SLOW_NAMES`: it trains through
Lightning's ``fit`` or a launcher, or it starts a subprocess. Tests marked ``training`` are slow
too, and a test known to take over about 2 s for another reason is marked ``slow`` by hand. A
test that fits on purpose in the fast tier (one representative method per data path) says so with
``@pytest.mark.fast``. The fast tier ends by listing the unmarked tests that took longer than
:data:`LISTED_OVER_S`, so that it stays fast as tests are added (a listing, never a failure).
"""

from __future__ import annotations

import inspect
import os
import types
from typing import Optional

import pytest

# names whose use means training or a new process: Lightning's `fit` (any trainer's), the
# launchers that call it, the CLI entry point, compare's runs, and subprocesses
SLOW_NAMES = frozenset(
    {"fit", "fit_or_raise", "run_pretrain", "run_linear", "run_compare", "run_spec", "main"}
    | {"subprocess", "Popen", "spawn", "Process", "run_tasks", "_run_in_processes"}
)
LISTED_OVER_S = 3.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run the slow tier")


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and its nested functions use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _functions(obj: object) -> list[types.FunctionType]:
    """The Python functions behind a test helper: itself, or a class's own methods."""
    if isinstance(obj, type):
        found = []
        for value in vars(obj).values():
            found += _functions(value.__func__ if isinstance(value, staticmethod) else value)
        return found
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return [obj] if isinstance(obj, types.FunctionType) else []


def _slow_name(function: types.FunctionType, seen: set) -> Optional[str]:
    """The first of :data:`SLOW_NAMES` that ``function`` reaches through the suite's helpers."""
    if function.__code__ in seen:
        return None
    seen.add(function.__code__)
    names = _names(function.__code__)
    if names & SLOW_NAMES:
        return f"{function.__qualname__} uses {sorted(names & SLOW_NAMES)[0]}"
    for obj in _suite_objects(function, names):
        for helper in _functions(obj):
            found = _slow_name(helper, seen)
            if found:
                return found
    return None


def _suite_objects(function: types.FunctionType, names: set[str]) -> list:
    """The objects of the suite's modules that ``function`` names: its globals, and the
    attributes it names of a suite module it holds (``gpu_path.fit_through_gpu_path``)."""
    found = []
    for name in sorted(names):
        obj = function.__globals__.get(name)
        if isinstance(obj, types.ModuleType):
            if obj.__name__.split(".")[0] == "tests":
                found += [getattr(obj, n) for n in sorted(names) if hasattr(obj, n)]
        elif str(getattr(obj, "__module__", None)).split(".")[0] == "tests":
            found.append(obj)
    return found


def slow_reason(item: pytest.Item) -> Optional[str]:
    """Why ``item`` belongs to the slow tier, or None."""
    if item.get_closest_marker("slow") or item.get_closest_marker("training"):
        return "marked"
    if item.get_closest_marker("fast") or not isinstance(item, pytest.Function):
        return None
    seen: set = set()
    fixtures = item._fixtureinfo.name2fixturedefs
    functions = [item.function] + [
        inspect.unwrap(defs[-1].func) for name, defs in fixtures.items() if defs
    ]
    for function in functions:
        if isinstance(function, types.FunctionType) and function.__module__.startswith("tests"):
            found = _slow_name(function, seen)
            if found:
                return found
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    runslow = config.getoption("--runslow")
    skip = pytest.mark.skip(reason="slow tier: run with --runslow")
    for item in items:
        if slow_reason(item) is None:
            continue
        if not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        if not runslow:
            item.add_marker(skip)


_UNMARKED_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call") and "slow" not in report.keywords:
        _UNMARKED_SECONDS[report.nodeid] = _UNMARKED_SECONDS.get(report.nodeid, 0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    over = sorted(
        ((s, nodeid) for nodeid, s in _UNMARKED_SECONDS.items() if s > LISTED_OVER_S), reverse=True
    )
    if over:
        terminalreporter.section(f"fast-tier tests over {LISTED_OVER_S:.0f} s (setup + call)")
        for seconds, nodeid in over:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
        terminalreporter.write_line(
            "Make them faster or mark them `@pytest.mark.slow` (a loaded machine lists more)."
        )


@pytest.fixture(autouse=True, scope="session")
def _decode_cache_in_a_temporary_folder(tmp_path_factory):
    """The suite never writes the user's decode cache (solo_diet.core.data.decode_cache);
    subprocesses inherit the variable."""
    os.environ["SOLO_DIET_CACHE"] = str(tmp_path_factory.mktemp("decode-cache"))
