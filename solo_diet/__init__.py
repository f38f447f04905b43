"""solo-diet: DIET, s-DIET, Simplicial Embeddings and CPLearn inside solo-learn. The core imports
without solo-learn; with it, the plugin methods register when ``solo.methods`` is imported
(``register()`` does it explicitly)."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from typing import Any, Optional

from solo_diet.host import IMPORT_NOISE, skip_umap_callback_without_umap, solo_available

__version__ = "0.1.0"
SOLO_METHODS = "solo.methods"


def register() -> list[str]:
    """Register every plugin method in ``solo.methods.METHODS``; idempotent; returns the names."""
    from solo_diet.methods.contract import register as _register

    return _register()


class _RegisterOnSoloImport:
    """A ``sys.meta_path`` finder that makes ``solo.methods``' loader register the plugin methods
    once the module has run, once."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if name != SOLO_METHODS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module  # a file loader is made for this spec alone

        def exec_and_register(module: Any) -> None:
            with warnings.catch_warnings():  # as solo_available()'s import of solo-learn
                for pattern in IMPORT_NOISE:
                    warnings.filterwarnings("ignore", message=pattern)
                exec_module(module)
            # as `solo_available()`: only a solo-learn `main` (the 2021 release has no METHODS)
            if hasattr(module, "METHODS") and importlib.util.find_spec("solo.args") is not None:
                register()

        spec.loader.exec_module = exec_and_register
        return spec


def _register_now_or_on_solo_import() -> None:
    if SOLO_METHODS in sys.modules:
        if solo_available():
            register()
    elif importlib.util.find_spec("solo") is not None:
        skip_umap_callback_without_umap()  # as solo_available() would, before solo-learn loads
        if not any(isinstance(f, _RegisterOnSoloImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterOnSoloImport())


_register_now_or_on_solo_import()
