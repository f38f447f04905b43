"""Start-up: ``solo-diet --help`` and argument errors never load torch or solo-learn, and importing
``solo_diet`` still registers the plugin methods, whichever of the two is imported first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._helpers import requires_solo

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "lightning", "solo", "timm", "torchvision")
CLI = (
    "import sys\n"
    "from solo_diet.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit as exit:\n"
    "    print('STATUS', exit.code)\n"
    f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
)


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "argv, status",
    [
        (["--help"], 0),
        (["compare", "--help"], 0),
        (["pretrain"], 2),  # --config-path and --config-name missing
        (["no-such-command"], 2),
        (["data", "no-such-dataset", "out"], 2),
    ],
)
def test_help_and_argument_errors_load_neither_torch_nor_solo_learn(argv, status):
    done = _python(CLI, *argv)
    assert f"STATUS {status}" in done.stdout, done.stderr[-2000:]
    assert "LOADED []" in done.stdout


REGISTERED = (
    "import sys\n"
    "{first}\n"
    "{second}\n"
    "from solo.methods import METHODS\n"
    "print('DIET', METHODS['diet'].__module__, METHODS['sdiet'].__module__)\n"
)


@requires_solo()
@pytest.mark.parametrize("solo_first", [False, True])
def test_importing_solo_diet_registers_the_methods_in_either_order(solo_first):
    imports = ["import solo_diet", "import solo.methods"]
    first, second = reversed(imports) if solo_first else imports
    done = _python(REGISTERED.format(first=first, second=second))
    assert "DIET solo_diet.methods.diet solo_diet.methods.sdiet" in done.stdout, done.stderr[-3000:]
    assert "pkg_resources is deprecated" not in done.stderr or solo_first
