"""The settings parser: config sections read into typed, frozen dataclasses whose errors name the
key path, and the checks every layer shares (run names, finite numbers, method names)."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Mapping
from typing import Any, Collection, Iterator, Optional, Sequence

import omegaconf

from solo_diet.core.errors import ArgumentError, ConfigError, NamesArguments

FORMAT_KEY = "data.format"  # a launch config's data path: image_folder, gpu or dali
# A run name names a folder and its checkpoint files: 1 to 100 of these characters, not only dots.
RUN_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,100}\Z")


def check_run_name(name: object, what: str, fix: str) -> str:
    """``name`` if it is a safe run name, else one ConfigError naming ``what`` and the ``fix``."""
    text = str(name)
    if name is None or not RUN_NAME.match(text) or set(text) == {"."}:
        shown = f"{text[:120]!r}{'...' if len(text) > 120 else ''}"
        raise ConfigError(
            f"{what} {shown} must be 1 to 100 letters, digits, '_', '.' or '-' (not only dots): "
            f"it names the run's folder and files. {fix}"
        )
    return text


@contextlib.contextmanager
def core_errors_named(keys: Mapping[str, str]) -> Iterator[None]:
    """In the block, a core error naming an argument of ``keys`` names ``keys[name]`` instead."""
    try:
        yield
    except NamesArguments as error:
        if not error.arguments() & set(keys):
            raise
        error.keys = {**keys, **error.keys}  # an inner block's names stay
        error.args = (error.named(error.keys),)
        if type(error) is not ArgumentError:
            raise
        raise ConfigError(*error.args).with_traceback(error.__traceback__) from None


def closest_name(name: object, known: Collection[str], cutoff: float = 0.6) -> Optional[str]:
    """The name of ``known`` closest to ``name`` (difflib ratio >= ``cutoff``), or None."""
    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def unknown_method_hint(name: object, registered: Collection[str]) -> str:
    """The hint after "unknown method": the closest names, else the registered ones."""
    close = difflib.get_close_matches(str(name), sorted(registered), n=3, cutoff=0.6)
    listing = "`solo-diet methods` lists every registered method."
    if close:
        names = [f"`{c}`" for c in close]
        either = " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        return f"did you mean {either}? {listing}"
    bases = sorted({m.removesuffix("_sem") for m in registered})
    return f"registered: {', '.join(bases)} (most also as `<name>_sem`). {listing}"


_ABSENT = object()


def device_count(cfg: omegaconf.DictConfig) -> int:
    """The devices a cfg trains on (a node's): a positive count or a list of ids. ``auto`` or -1
    are refused: solo-learn scales the learning rate by ``len(devices)`` (``auto`` reads as 4)."""
    devices = omegaconf.OmegaConf.select(cfg, "devices", default=1)
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, (list, omegaconf.ListConfig)) and len(devices) > 0:
        return len(devices)
    if is_number(devices) and devices == int(devices) and devices > 0:
        return int(devices)
    raise ConfigError(
        f"`devices` must be a positive count or a list of device ids, got {devices!r}: "
        "solo-learn scales the learning rate by len(devices). Write devices=1 (or the count "
        "you train on)."
    )


def world_size(cfg: omegaconf.DictConfig) -> int:
    """The processes a cfg trains over: ``devices`` times ``num_nodes``."""
    return device_count(cfg) * int(omegaconf.OmegaConf.select(cfg, "num_nodes", default=1))


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class KeyReader:
    """Reads and checks one config node; ``default`` stands for absent, None and "None"."""

    def __init__(self, node: Any, prefix: str = ""):
        self.node, self.prefix = node, prefix

    def name(self, key: str) -> str:
        """The full key of ``key``, as the user writes it."""
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, problem: str) -> ConfigError:
        """One line: the full key in backticks, then ``problem`` (what is wanted, and the fix)."""
        space = "" if problem[:1] in (":", ",") else " "
        return ConfigError(f"`{self.name(key)}`{space}{problem}")

    def value(self, key: str, default: Any = _ABSENT) -> Any:
        """The value at the dotted ``key`` (class docstring for ``default``)."""
        if isinstance(self.node, omegaconf.DictConfig):
            value = omegaconf.OmegaConf.select(self.node, key)
        else:
            value = self.node
            for part in key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
        if default is not _ABSENT and (value is None or value == "None"):
            return default
        return value

    def int(self, key: str, minimum: int = 1, *, default: Any = _ABSENT, hint: str = "") -> int:
        """An integer (not a bool) ``>= minimum``; ``hint`` ends the error message."""
        value = self.value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            wanted = {0: "a non-negative integer", 1: "a positive integer"}.get(
                minimum, f"an integer >= {minimum}" if minimum > -math.inf else "an integer"
            )
            raise self.fail(key, f"must be {wanted}, got {value!r}. {hint}".rstrip())
        return value

    def choice(self, key: str, choices: Sequence[str], *, default: Any = _ABSENT) -> str:
        """One of ``choices``; the error names the closest."""
        value = self.value(key, default)
        if value not in choices:
            close = closest_name(value, choices)
            hint = f"; did you mean {close!r}?" if close else "."
            raise self.fail(key, f"must be one of {list(choices)}, got {value!r}{hint}")
        return value

    def bool(self, key: str, *, default: Any = _ABSENT) -> bool:
        """True or False (not 0/1 or a string)."""
        value = self.value(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be True or False, got {value!r}.")
        return value

    def probability(self, key: str, default: float) -> float:
        """A probability in [0, 1]."""
        value = self.value(key, default)
        if not is_number(value) or not 0 <= value <= 1:
            raise self.fail(key, f"must be a probability in [0, 1], got {value!r}.")
        return float(value)

    def known(self, section: str, known: Collection[str], owner: str) -> None:
        """Refuse a key of ``<section>`` outside ``known``, naming the closest known key."""
        unknown = sorted(set(self.value(section) or {}) - set(known))
        if unknown:
            close = closest_name(unknown[0], known)
            hint = f" Did you mean `{self.name(section)}.{close}`?" if close else ""
            raise self.fail(
                f"{section}.{unknown[0]}",
                f"is not a setting of {owner}.{hint} Its settings: {', '.join(sorted(known))}.",
            )


def setting(default: Any = None, **checks: Any) -> Any:
    """A schema field: ``default``, ``checks`` choices/minimum/within/derive/hint/key."""
    return dataclasses.field(default=default, metadata=checks)


def _read_setting(read: KeyReader, key: str, kind: Any, default: Any, checks: Mapping) -> Any:
    """The value of ``key`` (``default`` when absent), checked against its type and ``checks``."""
    if typing.get_origin(kind) is typing.Union and type(None) in typing.get_args(kind):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
        if read.value(key, default) is None:
            return None
    if kind is bool:
        return read.bool(key, default=default)
    if kind is int:
        minimum, hint = checks.get("minimum", -math.inf), checks.get("hint", "")
        return read.int(key, minimum, default=default, hint=hint)
    if checks.get("choices"):
        return read.choice(key, checks["choices"], default=default)
    value = read.value(key, default)
    if kind is float and checks.get("within"):
        (low, high), closed = checks["within"], checks.get("high_inclusive", False)
        bound = "]" if closed else ")"
        if not is_number(value) or not low <= value <= high or (value == high and not closed):
            raise read.fail(key, f"must be in [{low}, {high}{bound}, got {value!r}.")
        return float(value)
    if kind is float and not is_number(value):
        raise read.fail(key, f"must be a number, got {value!r}.")
    if kind is str and not isinstance(value, str):
        raise read.fail(key, f"must be a string, got {value!r}.")
    return value


_Schema = typing.TypeVar("_Schema")


def schema_keys(schema: type) -> list[str]:
    """A schema's fields but those marked ``computed`` (set by its ``checked``)."""
    return [f.name for f in dataclasses.fields(schema) if not f.metadata.get("computed")]


def parse_section(
    schema: type[_Schema], cfg: Any, path: str, owner: str, *, strict: bool = True
) -> _Schema:
    """The frozen ``schema`` of the mapping at ``path`` of ``cfg`` (defaults for absent keys;
    ``strict``: unknown keys refused naming the closest); ``checked(cfg)`` is the caller's."""
    read = KeyReader(cfg)
    given = read.value(path) if path else cfg
    names = schema_keys(schema)
    if given is not None and given != "None" and not isinstance(given, Mapping):
        raise read.fail(path, f"must be a mapping of {names}, got {given!r}.")
    if strict:
        read.known(path, names, owner)
    kinds = typing.get_type_hints(schema)
    values = {}
    for field in dataclasses.fields(schema):
        if field.name not in names:
            continue
        checks, kind = field.metadata, kinds[field.name]
        key = checks.get("key") or (f"{path}.{field.name}" if path else field.name)
        if dataclasses.is_dataclass(kind):
            values[field.name] = parse_section(kind, cfg, key, getattr(kind, "owner", owner))
        else:
            default = checks["derive"](cfg) if checks.get("derive") else field.default
            values[field.name] = _read_setting(read, key, kind, default, checks)
    return schema(**values)


def write_section(cfg: omegaconf.DictConfig, path: str, parsed: Any) -> None:
    """Write every value of ``parsed`` at ``path`` of ``cfg`` (for solo-learn and ``args.json``)."""
    values = dataclasses.asdict(parsed)
    for key in schema_keys(type(parsed)):
        value = list(values[key]) if isinstance(values[key], tuple) else values[key]
        omegaconf.OmegaConf.update(cfg, f"{path}.{key}", value, merge=False, force_add=True)
