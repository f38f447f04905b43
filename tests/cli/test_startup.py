"""Start-up: ``solo-diet --help``, argument errors and a zip-bomb checkpoint never load torch or
solo-learn, and importing ``solo_diet`` still registers the plugin methods, whichever of the two is
imported first."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests._helpers import requires_solo

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "lightning", "solo", "timm", "torchvision")
CLI = (
    "import sys\n"
    "from solo_diet.cli.main import main\n"
    "try:\n"
    "    print('STATUS', main(sys.argv[1:]))\n"
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


COMPARE_CONFIGS = REPO / "benchmarks" / "compare" / "configs"


@requires_solo()
@pytest.mark.parametrize(
    "command, override, expected",
    [
        ("pretrain", "method=dieet", "unknown `method: dieet`; did you mean `diet`"),
        ("pretrain", "max_epoch=3", "`max_epoch` is not a key of the config; did you mean `max_"),
        ("pretrain", "+max_epoch=3", "`max_epoch` is not a key solo-learn or Lightning reads"),
        ("pretrain", "optimizer.lr=-1", "`optimizer.lr` must be a positive finite number, got -1"),
        ("linear", "optimizer.batch_size=0", "`optimizer.batch_size` must be a positive"),
    ],
)
def test_a_typo_is_one_line_before_torch_lightning_or_solo_learn_loads(command, override, expected):
    """The issue's first typo, ``solo-diet pretrain --config-path benchmarks/compare/configs
    --config-name diet.yaml method=dieet accelerator=cpu``, and its kin: refused by the checks
    that run before the heavy imports (seconds of start-up a typo should not cost)."""
    config = "diet.yaml" if command == "pretrain" else "linear.yaml"
    argv = [command, "--config-path", str(COMPARE_CONFIGS), "--config-name", config]
    done = _python(CLI, *argv, override, "accelerator=cpu")
    assert "STATUS 2" in done.stdout and "LOADED []" in done.stdout, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"solo-diet {command}: ") and expected in line, line


def zip_bomb(path: Path, mib: int) -> Path:
    """A zip named like a checkpoint whose ``archive/data.pkl`` is ``mib`` MiB of deflated zeros."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/version", "3\n")
        with archive.open("archive/data.pkl", "w", force_zip64=True) as f:
            for _ in range(mib):
                f.write(bytes(1 << 20))
    return path


@requires_solo()
@pytest.mark.parametrize(
    "command, key",
    [("pretrain", "+resume_from_checkpoint"), ("linear", "pretrained_feature_extractor")],
)
def test_a_zip_bomb_checkpoint_is_refused_before_torch_loads(command, key, tmp_path):
    bomb = zip_bomb(tmp_path / "bomb-ep=9.ckpt", 64)  # 64 MiB declared in ~70 kB
    config = "diet.yaml" if command == "pretrain" else "linear.yaml"
    argv = [command, "--config-path", str(COMPARE_CONFIGS), "--config-name", config]
    done = _python(CLI, *argv, f"{key}={bomb}", "accelerator=cpu")
    assert "STATUS 2" in done.stdout and "LOADED []" in done.stdout, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"solo-diet {command}: `{key.lstrip('+')}`: checkpoint {bomb} does not load: it is corrupt "
        "or hostile: its zip entries unpack to 67,108,"
    ), line
    assert "pickle" not in line


# what each subcommand's --help must name besides its description and CPU example
HELP_NAMES = {
    "methods": ["origin"],
    "pretrain": ["--config-name diet.yaml", "accelerator=cpu", "precision=32", "last checkpoint"],
    "linear": ["pretrained_feature_extractor='", "accelerator=cpu", "precision=32"],
    "data": ["the dataset to write", "solo-diet data animal-mnist"],
    "demo": ["--accelerator cpu", "auto: the GPU when torch sees one, else the CPU"],
    "compare": ["'only=[", "'seeds=[", "'trainer=[accelerator=cpu,precision=32", "only=[...] runs"],
    "configs": ["solo-diet configs cfg"],
}


def test_every_subcommand_help_has_a_description_and_a_cpu_example():
    from solo_diet.cli.main import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(HELP_NAMES) | {"solo-script"} == set(commands.choices)
    for name, expected in HELP_NAMES.items():
        text = commands.choices[name].format_help()
        assert commands.choices[name].description and "\nexample:\n" in text, name
        assert all(part in text for part in expected), (name, text)


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
