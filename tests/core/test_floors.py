"""The floors: imports only go down. From the top: ``solo_diet/cli`` (thin commands),
``solo_diet/compare`` (the comparison runner), ``solo_diet/launch`` (settings, data paths and the
runs that pretrain, linear and compare share), ``solo_diet/methods`` (solo-learn adapters) and
``solo_diet/core`` (torch only), which imports neither solo-learn nor Lightning: checked on the
source, lazy imports and ``importlib.import_module("...")`` included. Every module lies in one of
these folders, but for the package's root: ``__init__`` (registration) and ``host`` (finding
solo-learn), which import no floor but the core (``__init__``'s ``register()`` aside). Inside a
floor the imports form no cycle, local (function-level) and ``TYPE_CHECKING`` imports counted: a
local import is for start-up time, never to hide a cycle. The core and the modules of its tests
then import with solo-learn and Lightning made unimportable, so a CI without solo-learn collects
every core test (a core test may still compare against solo-learn inside a test marked
``requires_solo``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests._helpers.core import FLOORS, PACKAGE, REPO, _floor

HOST_LIBRARIES = ("solo", "lightning", "pytorch_lightning", "hydra")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _name_floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in (*FLOORS, "core") else "package"


def _package_imports(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, at any depth of its code: ``from a.b import c``
    counts ``a.b.c`` when it is a module, else ``a.b``; relative imports resolved."""
    this = _module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.update([full] if full in modules else [base] if base in modules else [])
    return found - {this}


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """The import cycles within a floor of ``package``: each a list of modules that import one
    another around (strongly connected components of the floor's import graph)."""
    paths = {_module_name(p, package.parent): p for p in package.rglob("*.py")}
    modules = set(paths)
    graph = {
        name: sorted(
            target
            for target in _package_imports(path, package.parent, modules)
            if _name_floor(target) == _name_floor(name)
        )
        for name, path in paths.items()
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        order[name] = low[name] = len(order)
        stack.append(name)
        for target in graph[name]:
            if target not in order:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], order[target])
        if low[name] == order[name]:
            component = stack[stack.index(name) :]
            del stack[stack.index(name) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return cycles


def test_no_import_cycle_inside_a_floor() -> None:
    assert import_cycles() == []


def test_the_cycle_check_sees_a_local_import_closing_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "solo_diet"
    (package / "launch").mkdir(parents=True)
    for name in ("__init__.py", "launch/__init__.py"):
        (package / name).write_text("")
    (package / "launch" / "a.py").write_text("from solo_diet.launch.b import B\n")
    (package / "launch" / "b.py").write_text("def f():\n    from solo_diet.launch import a\n")
    (package / "c.py").write_text("from solo_diet.launch import a\n")  # across floors: no cycle
    assert import_cycles(package) == [["solo_diet.launch.a", "solo_diet.launch.b"]]


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
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


def test_the_import_check_sees_import_module_by_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import importlib\ndef f():\n    importlib.import_module('solo.methods')\n")
    assert _imported(module) == {"importlib", "solo.methods"}


def test_every_module_lies_in_a_floor_folder() -> None:
    loose = [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py") if _floor(p) == "none"]
    assert not loose, f"modules outside the floor folders: {loose}"


def test_imports_only_go_down() -> None:
    packages = tuple(f"solo_diet.{floor}" for floor in FLOORS)
    above = {floor: packages[:i] for i, floor in enumerate(FLOORS)}
    above["core"] = HOST_LIBRARIES + packages + ("solo_diet.host",)
    above["package"] = packages
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
