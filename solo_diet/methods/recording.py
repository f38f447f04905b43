"""A recording view of a config: which keys were read, whoever read them.

:func:`recorded_reads` turns a ``DictConfig`` (and every section of it that is read) into a view
that notes each key looked up, by attribute, item, ``get``, ``in``, ``OmegaConf.select`` or
solo-learn's ``omegaconf_select``, and turns it back when the block ends. The view is the config
object itself, so code that mutates it in place (``fill_default``, ``OmegaConf.update``) and
returns it works unchanged; no module-level or context state is involved.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from omegaconf import DictConfig

_RECORD = "_recorded_reads"
_PREFIX = "_recorded_prefix"


class _Record:
    """The keys read (full dotted paths) and the sections turned into views."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.views: list[DictConfig] = []

    def watch(self, node: DictConfig, prefix: str) -> None:
        object.__setattr__(node, "__class__", _RecordingDictConfig)
        node.__dict__[_RECORD] = self
        node.__dict__[_PREFIX] = prefix
        self.views.append(node)

    def release(self) -> None:
        for node in self.views:
            object.__setattr__(node, "__class__", DictConfig)
            node.__dict__.pop(_RECORD, None)
            node.__dict__.pop(_PREFIX, None)
        self.views.clear()


class _RecordingDictConfig(DictConfig):
    """A ``DictConfig`` whose every key lookup is noted in its record; a section read through it
    becomes a view too."""

    def _get_node(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        record: _Record = self.__dict__[_RECORD]
        full_key = f"{self.__dict__[_PREFIX]}{key}"
        record.keys.add(full_key)  # before the lookup, which may raise for a missing key
        node = super()._get_node(key, *args, **kwargs)
        if type(node) is DictConfig:
            record.watch(node, f"{full_key}.")
        return node


def is_recording(cfg: object) -> bool:
    """Whether ``cfg`` is already a recording view (an enclosing :func:`recorded_reads` block)."""
    return isinstance(cfg, _RecordingDictConfig)


@contextlib.contextmanager
def recorded_reads(cfg: DictConfig) -> Iterator[set[str]]:
    """Inside the block ``cfg`` records the full key of every lookup into the yielded set (a
    section's keys as ``section.key``); afterwards it is a plain ``DictConfig`` again."""
    record = _Record()
    record.watch(cfg, "")
    try:
        yield record.keys
    finally:
        record.release()
