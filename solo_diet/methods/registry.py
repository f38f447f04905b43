"""Registration of the plugin methods into solo-learn's method registry."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

import solo_diet.methods as package
from solo_diet._host import require_solo
from solo_diet.config import core_errors_named
from solo_diet.methods import PLUGIN_FACTORIES
from solo_diet.methods.contract import ContractError, registered_class


def plugin_methods() -> dict[str, type]:
    """Every class that a module of this package (``solo_diet/methods/<module>.py``, not
    ``_private``) defines with ``registered_as = "<name>"`` in its body, by name."""
    found: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for cls in vars(module).values():
            if not (isinstance(cls, type) and cls.__module__ == module.__name__):
                continue
            name = cls.__dict__.get("registered_as")
            if name is None:
                continue
            if name in found and found[name] is not cls:
                raise ContractError(
                    f"two plugin methods are registered as '{name}': "
                    f"{found[name].__module__}.{found[name].__qualname__} and "
                    f"{cls.__module__}.{cls.__qualname__}; rename one's `registered_as`."
                )
            found[name] = cls
    return found


def _add(methods_module, name: str, cls: type) -> None:
    registry = methods_module.METHODS
    present = registry.get(name, cls)  # ours again (a reload of this module) is replaced
    same = present.__module__ == cls.__module__ and present.__qualname__ == cls.__qualname__
    if not same:
        raise RuntimeError(
            f"solo-diet cannot register method '{name}': solo-learn already has "
            f"{present.__module__}.{present.__qualname__} under that name."
        )
    registry[name] = registered_class(cls, plugin=True)
    setattr(methods_module, cls.__name__, cls)


class _KeysNamed:
    """A plugin backbone factory whose errors name ``backbone.kwargs.<argument>`` where the core's
    name the argument (solo-learn passes ``backbone.kwargs`` as keyword arguments). Picklable, as
    the factory it wraps (a model keeps its factory)."""

    def __init__(self, factory: Callable[..., Any]):
        self.__wrapped__ = factory  # inspect.signature reads the factory's own

    def __call__(self, method: str, **kwargs: Any) -> Any:
        with core_errors_named({name: f"backbone.kwargs.{name}" for name in kwargs}):
            return self.__wrapped__(method, **kwargs)


def register() -> list[str]:
    """Add every plugin method and generated twin (contracts checked) to
    ``solo.methods.METHODS``, the plugin backbones to ``BaseMethod._BACKBONES`` and ``lars_foreach``
    to the optimizers of ``BaseMethod`` and ``LinearModel``. Idempotent; returns the registered
    names.
    """
    require_solo()
    import solo.methods as methods_module
    from solo.methods.base import BaseMethod
    from solo.methods.linear import LinearModel

    from solo_diet.backbones import PLUGIN_BACKBONES
    from solo_diet.lars import ForeachLARS

    for name, factory in PLUGIN_BACKBONES.items():
        BaseMethod._BACKBONES.setdefault(name, _KeysNamed(factory))
    for model_cls in (BaseMethod, LinearModel):
        model_cls._OPTIMIZERS.setdefault("lars_foreach", ForeachLARS)

    names = []
    for name, cls in plugin_methods().items():
        _add(methods_module, name, cls)
        names.append(name)
    for target in PLUGIN_FACTORIES:
        module_name, attr = target.split(":")
        factory = getattr(importlib.import_module(module_name), attr)
        generated = factory(dict(methods_module.METHODS))
        for name, cls in generated.items():
            _add(methods_module, name, cls)
            names.append(name)
    return names
