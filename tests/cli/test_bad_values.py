"""Values that used to end in a traceback deep inside a run, or in a silent wrong result: each is
refused in one line naming the key and its allowed range, exit 2, before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from tests._helpers.cli import PRETRAIN, cli, last_line, overrides
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from tests._helpers.synthetic import write_image_folder

    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=5, per_class=6, seed=0)
    write_image_folder(root / "val", num_classes=5, per_class=2, seed=1)
    write_image_folder(root / "one_class", num_classes=1, per_class=6, seed=2)
    return root


BAD_VALUES = [
    ("checkpoint.frequency=0", "`checkpoint.frequency` must be a positive integer, got 0."),
    ("checkpoint.frequency=abc", "`checkpoint.frequency` must be a positive integer, got 'abc'."),
    ("checkpoint.frequency=-1", "`checkpoint.frequency` must be a positive integer, got -1."),
    ("++check_val_every_n_epoch=0", "`check_val_every_n_epoch` must be a positive integer, got 0"),
    ("optimizer.weight_decay=-1", "`optimizer.weight_decay` must be in [0.0, inf), got -1."),
    ("precision=banana", "`precision` must be one of ['16-mixed', 'bf16-mixed', '32-true'"),
    ("data.train_path={one_class}", "holds 1 class(es); the online linear probe needs at least 2"),
]


def refused(argv: list[str], capsys, message: str, out: Path) -> None:
    """Exit 2, one line (no traceback) holding ``message``, and no run folder."""
    code, _, err = cli(argv, capsys)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert last_line(err).startswith("solo-diet pretrain: ") and message in last_line(err)
    assert not list(out.glob("diet/*"))


@pytest.mark.parametrize("value, message", BAD_VALUES, ids=[v for v, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_naming_its_key_and_range_before_training(
    data, tmp_path, capsys, value, message
):
    value = value.format(one_class=data / "one_class")
    refused(PRETRAIN + overrides(data, tmp_path) + [value], capsys, message, tmp_path)


@pytest.mark.parametrize(
    "value, message",
    [
        ("evaluation.knn_k=0", "`evaluation.knn_k` must be a positive integer, got 0."),
        ("data.train_path={one_class}", "holds 1 class(es); the linear probe (solo-learn's"),
    ],
)
def test_compare_refuses_a_probe_that_cannot_measure_before_pretraining(
    data, tmp_path, capsys, value, message
):
    value = value.format(one_class=data / "one_class")
    argv = ["compare", str(SHIPPED_SPEC), *tiny_overrides(data, tmp_path / "out"), value]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert last_line(err).startswith("solo-diet compare: ") and message in last_line(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_rerun_of_a_finished_run_checks_the_config_before_saying_nothing_to_train(
    data, tmp_path, capsys
):
    code, _, err = cli(PRETRAIN + overrides(data, tmp_path), capsys)
    assert code == 0, err
    code, out, err = cli(PRETRAIN + overrides(data, tmp_path) + ["checkpoint.frequency=0"], capsys)
    assert code == 2 and "nothing to train" not in out
    assert "`checkpoint.frequency` must be a positive integer, got 0." in last_line(err)
