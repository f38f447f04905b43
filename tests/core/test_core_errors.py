"""The core raises plain errors about its own arguments (``argument `image_size```), never naming a
config key: the launchers' settings (and the method adapters) translate arguments into keys. Checked
on the source: every string of every ``raise`` statement of a core module, f-strings included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests._helpers.core import PACKAGE, REPO, _floor

CONFIG_KEY = re.compile(
    r"\b(?:data|optimizer|method_kwargs|backbone|scheduler|checkpoint|auto_resume|knn_eval|wandb|"
    r"dali|augmentations)(?:\.[A-Za-z_]|\[|`)|\bmethod_kwargs\b|`augmentations\b"
)


def raised_strings(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each string constant inside a ``raise`` statement of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            found += [
                (part.lineno, part.value)
                for part in ast.walk(node.exc)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            ]
    return found


def test_the_pattern_finds_config_keys_and_spares_arguments():
    named = ["`data.gpu.image_size` must", "data.dataset=cifar10", "`augmentations[1].mean`"]
    named += ["`method_kwargs.labels` must", "set `optimizer.lr`", "`augmentations` must list"]
    plain = ["argument `image_size` must", "argument `nodes[1].mean`", "the data path /x is not"]
    plain += ["the dataset is empty", "decoding the data. Remove it"]
    assert all(CONFIG_KEY.search(text) for text in named)
    assert not any(CONFIG_KEY.search(text) for text in plain)


def test_no_core_error_names_a_config_key():
    wrong = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if _floor(path) == "core"
        for line, text in raised_strings(path)
        if CONFIG_KEY.search(text)
    ]
    assert not wrong, "name the argument instead (the launcher names the key):\n" + "\n".join(wrong)
