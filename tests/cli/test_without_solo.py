"""Every command in an environment where solo-learn cannot be imported: the install message, exit
status 2, no traceback. Runs whether or not solo-learn is installed (a subprocess hides it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# `import solo` fails (ModuleNotFoundError) when sys.modules maps it to None, as if not installed.
HIDE_SOLO = (
    "import sys; sys.modules['solo'] = None; from solo_diet.cli.main import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def run_without_solo(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("SOLO_DIET_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", HIDE_SOLO, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["methods"],
        [
            "pretrain",
            "--config-path",
            str(ROOT / "scripts/pretrain/custom"),
            "--config-name",
            "diet",
        ],
        ["linear", "--config-path", str(ROOT / "scripts/linear/custom"), "--config-name", "diet"],
        ["demo", "--epochs", "1"],
        ["compare", str(ROOT / "benchmarks/compare/animal_mnist.yaml"), "output_dir=out"],
        ["solo-script", "main_knn.py"],
    ],
    ids=lambda args: args[0],
)
def test_every_solo_command_prints_the_install_message(args, tmp_path):
    done = run_without_solo(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"solo-diet {args[0]}: solo-learn is not installed.")
    assert (
        "git clone https://github.com/vturrisi/solo-learn" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert not any(tmp_path.iterdir())


def test_configs_and_data_errors_work_without_solo(tmp_path):
    done = run_without_solo(["configs", str(tmp_path / "cfg"), "--dataset", "cifar"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cfg" / "pretrain" / "cifar" / "diet.yaml").is_file()
    done = run_without_solo(
        ["data", "animal-mnist", str(tmp_path / "am"), "--limit", "0"], tmp_path
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        "solo-diet data: --limit must be a positive number of images, got 0."
    )
    (tmp_path / "file").touch()
    done = run_without_solo(["data", "animal-mnist", str(tmp_path / "file" / "am")], tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"solo-diet data: DIR {tmp_path}/file/am: {tmp_path}/file is a file, not a folder: pick "
        "another."
    )


@pytest.mark.parametrize(("command", "required"), [("compare", "spec"), ("solo-script", "script")])
def test_a_missing_argument_is_named_alone(tmp_path, command, required):
    """argparse names only what is required: compare's overrides and solo-script's own arguments
    are optional."""
    done = run_without_solo([command], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"solo-diet {command}: error: the following arguments are required: {required}"
    )


def test_pytest_names_each_solo_module_it_did_not_run(tmp_path):
    """The suite in a process without solo-learn: each solo-learn module is one skip, and pytest's
    own skip summary (``-rs``) names it with the reason and the install hint."""
    files = ["tests/methods/test_diet.py", "tests/launch/test_launchers.py"]
    code = (
        "import sys; sys.modules['solo'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, "-q", "-rs", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 5, done.stdout[-3000:]  # pytest: no test ran (module-level skips)
    for path in files:
        said = rf"^SKIPPED \[1\] {re.escape(path)}:\d+: needs solo-learn main: solo-diet needs "
        assert re.search(said, done.stdout, re.MULTILINE), done.stdout[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("2 skipped in")
