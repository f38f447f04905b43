"""Config errors and the checks that raise them: no solo-learn, no Lightning.

Launchers, method adapters and the torch-only core share them; every message names the key and the
fix.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Mapping
from typing import Any, Collection, Iterator, Optional, Sequence

import omegaconf


class ConfigError(ValueError):
    """A config key has an invalid value; the message names the key and the fix."""


_ARGUMENT = re.compile(r"argument `(\w+)")
# A run name names a folder and its checkpoint files: 1 to 100 of these characters, not only dots.
RUN_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,100}\Z")


def check_run_name(name: object, what: str, fix: str) -> str:
    """``name`` when it is a safe run name (:data:`RUN_NAME`, not ``.`` or ``..``); otherwise one
    :class:`ConfigError` naming ``what`` (e.g. "`name`") and the ``fix``."""
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
    """Name config keys in the errors of the torch-only core, which speaks of its own arguments
    (``argument `<name>```, or ``argument `<name>.<sub.key>``` inside a mapping argument): a
    ``ValueError`` (or ``IndexError``) naming one of ``keys`` is raised again with ``keys[name]``
    wherever the core named ``name``, as a ConfigError (a ConfigError or an IndexError is the same
    error, its message renamed), with the core's traceback. Other errors pass unchanged. The
    settings layers hold the tables: the core never names a key."""
    try:
        yield
    except (ValueError, IndexError) as error:
        message = str(error)
        if not any(name in keys for name in _ARGUMENT.findall(message)):
            raise

        def key(match: re.Match) -> str:
            name = match.group(1)
            return f"`{keys[name]}" if name in keys else match.group(0)

        named = _ARGUMENT.sub(key, message)
        if isinstance(error, (ConfigError, IndexError)):
            error.args = (named,)
            raise
        raise ConfigError(named).with_traceback(error.__traceback__) from None


def closest_name(name: object, known: Collection[str], cutoff: float = 0.6) -> Optional[str]:
    """The name of ``known`` closest to ``name`` (difflib's ratio at least ``cutoff``), for a
    "did you mean" hint; None when none is close or ``name`` is not a string."""
    if not isinstance(name, str):
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def unknown_method_hint(name: object, registered: Collection[str]) -> str:
    """What follows "unknown method" in one line: the closest registered names (at most three),
    else the registered names without their ``_sem`` twins; both end with where the full list is."""
    close = difflib.get_close_matches(str(name), sorted(registered), n=3, cutoff=0.6)
    listing = f"`solo-diet methods` lists all {len(registered)} registered methods."
    if close:
        names = [f"`{c}`" for c in close]
        either = " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        return f"did you mean {either}? {listing}"
    bases = sorted({m.removesuffix("_sem") for m in registered})
    return f"registered: {', '.join(bases)} (most also as `<name>_sem`). {listing}"


def check_known_keys(
    cfg: omegaconf.DictConfig, section: str, known: Collection[str], owner: str
) -> None:
    """Refuse a key of ``cfg.<section>`` outside ``known`` (a typo would otherwise be ignored),
    naming the closest known key."""
    KeyReader(cfg).known(section, known, owner)


def fill_default(cfg: omegaconf.DictConfig, key: str, default: Any) -> Any:
    """Set ``cfg.<key>`` to ``default`` when absent and return its value (the string "None" reads as
    None, as in solo-learn's ``omegaconf_select``)."""
    value = omegaconf.OmegaConf.select(cfg, key, default=default)
    value = None if value == "None" else value
    omegaconf.OmegaConf.update(cfg, key, value, force_add=True)
    return value


def check_int(cfg: omegaconf.DictConfig, key: str, minimum: int, hint: str = "") -> int:
    """``cfg.<key>``, an integer (not a bool) ``>= minimum``; ``hint`` ends the error message."""
    return KeyReader(cfg).int(key, minimum, hint=hint)


def check_positive_int(cfg: omegaconf.DictConfig, key: str, hint: str = "") -> int:
    """``cfg.<key>``, an integer ``>= 1``; ``hint`` ends the error message."""
    return check_int(cfg, key, 1, hint)


def check_choice(cfg: omegaconf.DictConfig, key: str, choices: Sequence[str]) -> str:
    """``cfg.<key>``, one of ``choices``."""
    return KeyReader(cfg).choice(key, choices)


def check_bool(cfg: omegaconf.DictConfig, key: str) -> bool:
    """``cfg.<key>``, True or False (not 0/1 or a string)."""
    return KeyReader(cfg).bool(key)


def check_range(
    cfg: omegaconf.DictConfig, key: str, low: float, high: float, *, high_inclusive: bool = False
) -> float:
    """``low <= value < high`` (or ``<= high`` when ``high_inclusive``)."""
    return KeyReader(cfg).range(key, low, high, high_inclusive=high_inclusive)


_ABSENT = object()


def world_size(cfg: omegaconf.DictConfig) -> int:
    """The processes a cfg trains over: ``devices`` (a count or a list of ids) times
    ``num_nodes``."""
    devices = omegaconf.OmegaConf.select(cfg, "devices", default=1)
    per_node = devices if isinstance(devices, int) else len(devices)
    return per_node * int(omegaconf.OmegaConf.select(cfg, "num_nodes", default=1))


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class KeyReader:
    """Reads and checks the values of one config node: the one style of every config check
    (launchers' settings, augmentation nodes, methods' keys). Each error is one ConfigError line
    naming the full key (``<prefix>.<key>``) and the fix.

    A value is read as it stands, or with ``default`` when given: then an absent key, None and the
    string "None" (as solo-learn's ``omegaconf_select`` reads it) give the default."""

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
                minimum, f"an integer >= {minimum}"
            )
            raise self.fail(key, f"must be {wanted}, got {value!r}. {hint}".rstrip())
        return value

    def choice(self, key: str, choices: Sequence[str]) -> str:
        """One of ``choices``; the error names the closest."""
        value = self.value(key)
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

    def range(self, key: str, low: float, high: float, *, high_inclusive: bool = False) -> float:
        """A number with ``low <= value < high`` (or ``<= high`` when ``high_inclusive``)."""
        value = self.value(key)
        inside = is_number(value) and low <= value
        inside = inside and (value <= high if high_inclusive else value < high)
        if not inside:
            bound = "]" if high_inclusive else ")"
            raise self.fail(key, f"must be in [{low}, {high}{bound}, got {value!r}.")
        return float(value)

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
