"""The config checks every method uses: the value comes back when valid, and otherwise one
ConfigError names the key, what it must be and the value given. They and the augmentation nodes'
checks are one style: :class:`~solo_diet.core.settings.KeyReader`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
from omegaconf import OmegaConf

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader, parse_section, setting


def read_x(value) -> KeyReader:
    return KeyReader(OmegaConf.create({"method_kwargs": {"x": value}}))


@pytest.mark.parametrize(
    "minimum, value, ok",
    [(0, 0, True), (0, -1, False), (1, 1, True), (1, 0, False), (2, 2, True), (2, 1, False)],
)
def test_int_bounds(minimum, value, ok):
    if ok:
        assert read_x(value).int("method_kwargs.x", minimum) == value
    else:
        with pytest.raises(ConfigError, match=rf"`method_kwargs.x` must be .*, got {value}\."):
            read_x(value).int("method_kwargs.x", minimum)


@pytest.mark.parametrize("value", [True, 2.0, "3", None])
def test_int_refuses_what_is_not_an_int(value):
    with pytest.raises(ConfigError, match="must be a positive integer"):
        read_x(value).int("method_kwargs.x", 1)


@pytest.mark.parametrize(
    "minimum, words",
    [(0, "a non-negative integer"), (1, "a positive integer"), (3, "an integer >= 3")],
)
def test_int_message_says_what_is_wanted_and_ends_with_the_hint(minimum, words):
    with pytest.raises(ConfigError) as raised:
        read_x(-5).int("method_kwargs.x", minimum, hint="It is the width.")
    assert str(raised.value) == f"`method_kwargs.x` must be {words}, got -5. It is the width."


def test_bool_choice_and_range():
    assert read_x(False).bool("method_kwargs.x") is False
    with pytest.raises(ConfigError, match="True or False, got 1"):
        read_x(1).bool("method_kwargs.x")
    assert read_x("ce").choice("method_kwargs.x", ["ce", "mse"]) == "ce"
    with pytest.raises(
        ConfigError, match=r"one of \['ce', 'mse'\], got 'cee'; did you mean 'ce'\?"
    ):
        read_x("cee").choice("method_kwargs.x", ["ce", "mse"])
    with pytest.raises(ConfigError, match=r"got 'xyz'\.$"):  # nothing close: no hint
        read_x("xyz").choice("method_kwargs.x", ["ce", "mse"])
    with pytest.raises(ConfigError, match=r"got 3\.$"):  # not a string: no hint
        read_x(3).choice("method_kwargs.x", ["ce", "mse"])
    assert parse_section(Unit, read_x(1).node, "method_kwargs", "x").x == 1.0
    with pytest.raises(ConfigError, match=r"in \[0.0, 1.0\), got 1"):
        parse_section(Unit, OmegaConf.create({"y": 1}), "", "y")


@dataclass(frozen=True)
class Unit:
    x: float = setting(0.5, within=(0.0, 1.0), high_inclusive=True)
    y: float = setting(0.5, within=(0.0, 1.0))


@dataclass(frozen=True)
class Probe:
    width: int = setting(8, minimum=1, hint="It is the width.")
    loss: str = setting("ce", choices=("ce", "mse"))
    scale: float = setting(0.5, within=(0.0, 1.0))
    tag: Optional[str] = None
    on: bool = True


def test_a_schema_fills_defaults_checks_each_field_and_refuses_unknown_keys():
    cfg = OmegaConf.create({"m": {"width": 4, "tag": "None"}})
    assert parse_section(Probe, cfg, "m", "the probe") == Probe(width=4)
    bad = {
        "width": (0, r"^`m.width` must be a positive integer, got 0. It is the width.$"),
        "loss": ("cee", r"^`m.loss` must be one of \['ce', 'mse'\], got 'cee'; did you mean"),
        "scale": (1.5, r"^`m.scale` must be in \[0.0, 1.0\), got 1.5.$"),
        "tag": (3, r"^`m.tag` must be a string, got 3.$"),
        "on": ("yes", r"^`m.on` must be True or False, got 'yes'.$"),
        "widht": (3, r"^`m.widht` is not a setting of the probe. Did you mean `m.width`\?"),
    }
    for key, (value, message) in bad.items():
        with pytest.raises(ConfigError, match=message):
            parse_section(Probe, OmegaConf.create({"m": {key: value}}), "m", "the probe")


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
