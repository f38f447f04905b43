"""``method_kwargs`` keys renamed since a run was saved. A method declares them in its class
attribute ``renamed_method_kwargs`` ({old key: new key}); a config that still writes an old key gets
one error naming the new key (:func:`~solo_diet.methods.contract.refuse_renamed_kwargs`), and a
checkpoint's ``args.json`` that holds one loads under the new key (:func:`with_current_kwargs`)."""

from __future__ import annotations

import omegaconf


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
