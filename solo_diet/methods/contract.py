"""The method contract (docs/adding-a-method.md) and :func:`register`, which checks it."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, is_dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import omegaconf
from torch import nn

import solo_diet.methods as package
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import core_errors_named, parse_section, write_section
from solo_diet.host import METHODS_GROUP, require_solo

if TYPE_CHECKING:
    from torch.utils.data import Sampler


@dataclass(frozen=True)
class ExtraRepresentation:
    """A representation compare measures besides the backbone: ``features`` or ``codes``."""

    name: str
    encoder: nn.Module
    kind: str = "features"
    probe_overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("features", "codes"):
            raise ValueError(
                f"ExtraRepresentation.kind must be 'features' or 'codes', got {self.kind!r}"
            )


def no_batch_sampler(cfg: omegaconf.DictConfig, dataset: Sequence[Any]) -> None:
    """The default ``train_batch_sampler``: solo-learn's shuffled batches."""


def no_extra_evaluations(checkpoint: Any, settings: Mapping[str, Any]) -> list[ExtraRepresentation]:
    """The default ``extra_evaluations`` of a ``PretrainedCheckpoint``: nothing but the backbone."""
    return []


class ContractError(TypeError):
    """A method class declares no contract, a malformed one, or inherits two different ones."""


@dataclass(frozen=True)
class Contract:
    """A method class's answers to the launchers, compare and the tests (module docstring)."""

    uses_sample_indexes: bool = False
    kwargs: Optional[type] = None
    sem_unsupported: Optional[str] = None
    step_graph_unsupported: Optional[str] = None
    train_batch_sampler: Callable[..., Optional["Sampler"]] = no_batch_sampler  # (cfg, dataset)
    extra_evaluations: Callable[..., list[ExtraRepresentation]] = no_extra_evaluations
    views: int = 2
    smoke_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, (expected, ok) in FIELD_CHECKS.items():
            value = getattr(self, name)
            if not ok(value):
                raise ContractError(f"Contract.{name} must be {expected}, got {value!r}")


FIELD_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {  # field: (what it must be, test)
    "uses_sample_indexes": ("True or False", lambda v: isinstance(v, bool)),
    "kwargs": ("a dataclass or None", lambda v: v is None or is_dataclass(v)),
    "sem_unsupported": ("a reason or None", lambda v: isinstance(v, (str, type(None)))),
    "step_graph_unsupported": ("a reason or None", lambda v: isinstance(v, (str, type(None)))),
    "train_batch_sampler": ("callable", callable),
    "extra_evaluations": ("callable", callable),
    "views": ("a positive integer", lambda v: type(v) is int and v >= 1),
    "smoke_kwargs": ("a mapping", lambda v: isinstance(v, Mapping)),
}


DEFAULT_CONTRACT = Contract()  # of a class that declares none (solo-learn's own methods)


def method_contract(method_cls: type) -> Contract:
    """The contract ``method_cls`` or its bases declare, else :data:`DEFAULT_CONTRACT`."""
    own = method_cls.__dict__.get("contract")
    if own is not None:
        if not isinstance(own, Contract):
            raise ContractError(
                f"{method_cls.__qualname__}.contract must be a "
                f"solo_diet.methods.contract.Contract, got {own!r}."
            )
        return own
    inherited = {
        id(contract): (base, contract)
        for base in method_cls.__bases__
        if isinstance(contract := getattr(base, "contract", None), Contract)
    }
    if len(inherited) > 1:
        names = " and ".join(base.__qualname__ for base, _ in inherited.values())
        raise ContractError(
            f"{method_cls.__qualname__} inherits different contracts from {names}: declare "
            "`contract = Contract(...)` in its body."
        )
    return next(iter(inherited.values()))[1] if inherited else DEFAULT_CONTRACT


def parse_method_kwargs(cfg: omegaconf.DictConfig, method_cls: type) -> Optional[Any]:
    """``method_cls``'s ``kwargs`` parsed from ``cfg.method_kwargs``; None if it declares none."""
    schema = method_contract(method_cls).kwargs
    if schema is None:
        return None
    given = omegaconf.OmegaConf.select(cfg, "method_kwargs") or {}
    for old, new in getattr(method_cls, "renamed_method_kwargs", {}).items():
        if old in given:
            raise ConfigError(
                f"`method_kwargs.{old}` was renamed `method_kwargs.{new}`: write "
                f"`method_kwargs.{new}: {given[old]}` instead (a checkpoint saved with the "
                "old key still loads)."
            )
    return parse_section(schema, cfg, "method_kwargs", f"method `{cfg.method}`")


class DeclaredKwargs:
    """Mixin: ``self.hp`` parsed once before ``BaseMethod.__init__``, written back for args.json."""

    hp: Any

    def __init__(self, cfg: omegaconf.DictConfig):
        parsed = parse_method_kwargs(cfg, type(self))
        checked = getattr(parsed, "checked", None)
        self.hp = parsed if checked is None else checked(cfg)
        write_section(cfg, "method_kwargs", self.hp)
        super().__init__(cfg)


def plugin_methods() -> dict[str, type]:
    """{name: class} of this package's ``registered_as`` classes and the group's entry points."""
    declared: list[tuple[str, type]] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for cls in vars(module).values():
            name = cls.__dict__.get("registered_as") if isinstance(cls, type) else None
            if name is not None and cls.__module__ == module.__name__:
                declared.append((name, cls))
    declared += [(entry.name, entry.load()) for entry in entry_points(group=METHODS_GROUP)]
    found: dict[str, type] = {}
    for name, cls in declared:
        if name in found and found[name] is not cls:
            raise ContractError(
                f"two plugin methods are registered as '{name}': "
                f"{found[name].__module__}.{found[name].__qualname__} and "
                f"{cls.__module__}.{cls.__qualname__}; rename one (`registered_as`, or the "
                f"entry point's name in the `{METHODS_GROUP}` group)."
            )
        found[name] = cls
    return found


def _add(methods_module, classes: Mapping[str, type]) -> list[str]:
    """Put ``classes`` in ``methods_module.METHODS``, each checked to declare a well-formed contract
    in its own body; returns their names."""
    registry = methods_module.METHODS
    for name, cls in classes.items():
        present = registry.get(name, cls)  # ours again (a reload of this module) is replaced
        if (present.__module__, present.__qualname__) != (cls.__module__, cls.__qualname__):
            raise RuntimeError(
                f"solo-diet cannot register method '{name}': solo-learn already has "
                f"{present.__module__}.{present.__qualname__} under that name."
            )
        if "contract" not in cls.__dict__:
            raise ContractError(
                f"{cls.__module__}.{cls.__qualname__} declares no method contract: add the class "
                "attribute `contract = Contract(...)` (solo_diet.methods.contract), e.g. "
                "`contract = IndexMethod.contract` for an index-based method."
            )
        method_contract(cls)  # refuses a malformed or an ambiguous declaration
        registry[name] = cls
        setattr(methods_module, cls.__name__, cls)
    return list(classes)


class _KeysNamed:
    """A backbone factory whose errors name ``backbone.kwargs.<argument>``; picklable."""

    def __init__(self, factory: Callable[..., Any]):
        self.__wrapped__ = factory  # inspect.signature reads the factory's own

    def __call__(self, method: str, **kwargs: Any) -> Any:
        with core_errors_named({name: f"backbone.kwargs.{name}" for name in kwargs}):
            return self.__wrapped__(method, **kwargs)


def register() -> list[str]:
    """Register the plugin methods, twins, backbones and ``lars_foreach``; returns the names."""
    require_solo()
    import solo.methods as methods_module
    from solo.methods.base import BaseMethod
    from solo.methods.linear import LinearModel

    from solo_diet.core.backbones import PLUGIN_BACKBONES
    from solo_diet.core.lars import ForeachLARS

    for name, factory in PLUGIN_BACKBONES.items():
        BaseMethod._BACKBONES.setdefault(name, _KeysNamed(factory))
    for model_cls in (BaseMethod, LinearModel):
        model_cls._OPTIMIZERS.setdefault("lars_foreach", ForeachLARS)

    names = _add(methods_module, plugin_methods())
    # the SEM twins' factory (registry -> twins), named, not imported: sem.py imports this module
    twins = pkgutil.resolve_name("solo_diet.methods.sem:sem_twins")(dict(methods_module.METHODS))
    return names + _add(methods_module, twins)
