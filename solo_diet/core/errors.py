"""The errors of solo-diet: a config key with an invalid value (:class:`ConfigError`), and the
core's errors about its own arguments, which the settings layer names by the keys that set them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A config key has an invalid value; the message names the key and the fix."""


@dataclass(frozen=True)
class Argument:
    """A core function's argument ``name``, then ``rest`` (a key inside it, or a value)."""

    name: str
    rest: str = ""

    def named(self, keys: Mapping[str, str]) -> str:
        """``argument `<name><rest>``` as the core speaks, or ``keys[name]`` in its place."""
        if self.name in keys:
            return f"`{keys[self.name]}{self.rest}`"
        return f"argument `{self.name}{self.rest}`"


class NamesArguments(Exception):
    """A core error of text and :class:`Argument` parts, for :func:`core_errors_named`."""

    def __init__(self, *parts: Any):
        self.parts = parts
        self.keys: dict[str, str] = {}  # the config keys named so far (the innermost table wins)
        super().__init__(self.named({}))

    def arguments(self) -> set[str]:
        return {part.name for part in self.parts if isinstance(part, Argument)}

    def named(self, keys: Mapping[str, str]) -> str:
        return "".join(p.named(keys) if isinstance(p, Argument) else str(p) for p in self.parts)


class ArgumentError(NamesArguments, ConfigError):
    """A core function's argument has an invalid value (message parts: :class:`NamesArguments`)."""


class ArgumentIndexError(NamesArguments, IndexError):
    """A batch holds an index outside the range an argument sets (:class:`NamesArguments`)."""
