"""Config errors and the checks that raise them: no solo-learn, no Lightning.

Launchers, method adapters and the torch-only core share them; every message names the key and the
fix.
"""

from __future__ import annotations

import difflib
from typing import Any, Collection, Optional, Sequence

import omegaconf


class ConfigError(ValueError):
    """A config key has an invalid value; the message names the key and the fix."""


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
    given = omegaconf.OmegaConf.select(cfg, section) or {}
    unknown = sorted(set(given) - set(known))
    if unknown:
        close = closest_name(unknown[0], known)
        hint = f" Did you mean `{section}.{close}`?" if close else ""
        raise ConfigError(
            f"`{section}.{unknown[0]}` is not a setting of {owner}.{hint} Its settings: "
            f"{', '.join(sorted(known))}."
        )


def fill_default(cfg: omegaconf.DictConfig, key: str, default: Any) -> Any:
    """Set ``cfg.<key>`` to ``default`` when absent and return its value (the string "None" reads as
    None, as in solo-learn's ``omegaconf_select``)."""
    value = omegaconf.OmegaConf.select(cfg, key, default=default)
    value = None if value == "None" else value
    omegaconf.OmegaConf.update(cfg, key, value, force_add=True)
    return value


def check_int(cfg: omegaconf.DictConfig, key: str, minimum: int, hint: str = "") -> int:
    """``cfg.<key>``, an integer (not a bool) ``>= minimum``; ``hint`` ends the error message."""
    value = omegaconf.OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        wanted = {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, f"an integer >= {minimum}"
        )
        raise ConfigError(f"`{key}` must be {wanted}, got {value!r}. {hint}".rstrip())
    return value


def check_positive_int(cfg: omegaconf.DictConfig, key: str, hint: str = "") -> int:
    """``cfg.<key>``, an integer ``>= 1``; ``hint`` ends the error message."""
    return check_int(cfg, key, 1, hint)


def check_choice(cfg: omegaconf.DictConfig, key: str, choices: Sequence[str]) -> str:
    """``cfg.<key>``, one of ``choices``."""
    value = omegaconf.OmegaConf.select(cfg, key)
    if value not in choices:
        close = closest_name(value, choices)
        hint = f"; did you mean {close!r}?" if close else "."
        raise ConfigError(f"`{key}` must be one of {list(choices)}, got {value!r}{hint}")
    return value


def check_bool(cfg: omegaconf.DictConfig, key: str) -> bool:
    """``cfg.<key>``, True or False (not 0/1 or a string)."""
    value = omegaconf.OmegaConf.select(cfg, key)
    if not isinstance(value, bool):
        raise ConfigError(f"`{key}` must be True or False, got {value!r}.")
    return value


def check_range(
    cfg: omegaconf.DictConfig, key: str, low: float, high: float, *, high_inclusive: bool = False
) -> float:
    """``low <= value < high`` (or ``<= high`` when ``high_inclusive``)."""
    value = omegaconf.OmegaConf.select(cfg, key)
    inside = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value
    inside = inside and (value <= high if high_inclusive else value < high)
    if not inside:
        bound = "]" if high_inclusive else ")"
        raise ConfigError(f"`{key}` must be in [{low}, {high}{bound}, got {value!r}.")
    return float(value)
