"""``method_kwargs`` keys renamed since a run was saved. A method declares them in its class
attribute ``renamed_method_kwargs`` ({old key: new key}); a config that still writes an old key gets
one error naming the new key, and a checkpoint's ``args.json`` that holds one loads under the new
key."""

from __future__ import annotations

from typing import Mapping

import omegaconf

from solo_diet.config import ConfigError


def refuse_renamed_kwargs(cfg: omegaconf.DictConfig, renamed: Mapping[str, str]) -> None:
    """Refuse an old key of ``cfg.method_kwargs``, naming the key that replaced it."""
    given = omegaconf.OmegaConf.select(cfg, "method_kwargs") or {}
    for old, new in renamed.items():
        if old in given:
            raise ConfigError(
                f"`method_kwargs.{old}` was renamed `method_kwargs.{new}`: write "
                f"`method_kwargs.{new}: {given[old]}` instead (a checkpoint saved with the old "
                "key still loads)."
            )


def with_current_kwargs(args: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """A saved pretraining config (``args.json``) with the old keys its method renamed since moved
    to their new names, in place; a new key already there wins. Returns ``args``."""
    from solo.methods import METHODS

    from solo_diet.methods.registry import register

    register()
    method = METHODS.get(str(args.get("method")))
    kwargs = args.get("method_kwargs")
    if method is None or not isinstance(kwargs, omegaconf.DictConfig):
        return args  # an unknown method: loading it names the problem
    for old, new in getattr(method, "renamed_method_kwargs", {}).items():
        if old in kwargs:
            value = kwargs.pop(old)
            if new not in kwargs:
                kwargs[new] = value
    return args
