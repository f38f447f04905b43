"""solo-diet: DIET, s-DIET, Simplicial Embeddings and CPLearn inside solo-learn.

The torch-only core (``solo_diet.losses``, ``solo_diet.nn``, ``solo_diet.optim``, ...) imports
without solo-learn. When solo-learn ``main`` is importable, importing this package registers every
plugin method in ``solo.methods.METHODS``; ``register()`` does it explicitly.
"""

from solo_diet._host import solo_available

__version__ = "0.1.0"


def register() -> list[str]:
    """Register every plugin method in ``solo.methods.METHODS``; idempotent; returns the names."""
    from solo_diet.methods.registry import register as _register

    return _register()


if solo_available():
    register()
