"""The config checks every method uses: the value comes back when valid, and otherwise one
ConfigError names the key, what it must be and the value given. They and the augmentation nodes'
checks are one style: :class:`~solo_diet.config.KeyReader`."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from solo_diet.config import (
    ConfigError,
    KeyReader,
    check_bool,
    check_choice,
    check_int,
    check_positive_int,
    check_range,
)


def cfg_with(value):
    return OmegaConf.create({"method_kwargs": {"x": value}})


@pytest.mark.parametrize(
    "minimum, value, ok",
    [(0, 0, True), (0, -1, False), (1, 1, True), (1, 0, False), (2, 2, True), (2, 1, False)],
)
def test_check_int_bounds(minimum, value, ok):
    if ok:
        assert check_int(cfg_with(value), "method_kwargs.x", minimum) == value
    else:
        with pytest.raises(ConfigError, match=rf"`method_kwargs.x` must be .*, got {value}\."):
            check_int(cfg_with(value), "method_kwargs.x", minimum)


@pytest.mark.parametrize("value", [True, 2.0, "3", None])
def test_check_int_refuses_what_is_not_an_int(value):
    with pytest.raises(ConfigError, match="must be a positive integer"):
        check_positive_int(cfg_with(value), "method_kwargs.x")


@pytest.mark.parametrize(
    "minimum, words",
    [(0, "a non-negative integer"), (1, "a positive integer"), (3, "an integer >= 3")],
)
def test_check_int_message_says_what_is_wanted_and_ends_with_the_hint(minimum, words):
    with pytest.raises(ConfigError) as raised:
        check_int(cfg_with(-5), "method_kwargs.x", minimum, "It is the width.")
    assert str(raised.value) == f"`method_kwargs.x` must be {words}, got -5. It is the width."


def test_check_bool_choice_and_range():
    assert check_bool(cfg_with(False), "method_kwargs.x") is False
    with pytest.raises(ConfigError, match="True or False, got 1"):
        check_bool(cfg_with(1), "method_kwargs.x")
    assert check_choice(cfg_with("ce"), "method_kwargs.x", ["ce", "mse"]) == "ce"
    with pytest.raises(
        ConfigError, match=r"one of \['ce', 'mse'\], got 'cee'; did you mean 'ce'\?"
    ):
        check_choice(cfg_with("cee"), "method_kwargs.x", ["ce", "mse"])
    with pytest.raises(ConfigError, match=r"got 'xyz'\.$"):  # nothing close: no hint
        check_choice(cfg_with("xyz"), "method_kwargs.x", ["ce", "mse"])
    with pytest.raises(ConfigError, match=r"got 3\.$"):  # not a string: no hint
        check_choice(cfg_with(3), "method_kwargs.x", ["ce", "mse"])
    assert check_range(cfg_with(1), "method_kwargs.x", 0.0, 1.0, high_inclusive=True) == 1.0
    with pytest.raises(ConfigError, match=r"in \[0.0, 1.0\), got 1"):
        check_range(cfg_with(1), "method_kwargs.x", 0.0, 1.0)


def test_key_reader_names_the_full_key_of_a_node_and_reads_defaults():
    node = {"rrc": {"enabled": "None"}, "num_crops": 0, "grayscale": {"prob": 2}}
    read = KeyReader(node, "augmentations[1]")
    assert read.value("rrc.enabled", True) is True and read.value("no.such", 3) == 3
    assert read.value("rrc.enabled") == "None"  # without a default: the value as it stands
    with pytest.raises(ConfigError) as raised:
        read.int("num_crops", default=2)
    assert str(raised.value) == "`augmentations[1].num_crops` must be a positive integer, got 0."
    with pytest.raises(ConfigError, match=r"^`augmentations\[1\].grayscale.prob` must be a prob"):
        read.probability("grayscale.prob", 0.2)
    assert str(read.fail("crop_size", ": set it")) == "`augmentations[1].crop_size`: set it"
    cfg = OmegaConf.create({"data": {"gpu": {"storag": "auto"}}})
    with pytest.raises(ConfigError, match=r"^`data.gpu.storag` is not a setting of the GPU path\."):
        KeyReader(cfg).known("data.gpu", ["storage"], "the GPU path")
