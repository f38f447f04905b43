"""The method contract: what the launchers, ``solo-diet compare`` and the tests may ask a method.

Each method class declares its contract in its own body, as the class attribute
``contract = Contract(...)`` (or ``dataclasses.replace`` of a base's contract); every field has a
default:

- ``uses_sample_indexes``: the method reads the dataset index of each sample (``batch[0]``), so
  ``solo-diet pretrain`` sets ``method_kwargs.num_samples`` to the training set's size and refuses
  data paths that do not deliver real indices (DALI without ``encode_indexes_into_labels``).
- ``strict_method_kwargs``: every key of ``method_kwargs`` the method knows is read while its
  ``add_and_assert_specific_cfg`` runs (each gets its default there), so a key nobody read is a
  typo, refused when the method is built (``method_kwargs.label_smooting`` names
  ``label_smoothing``). Our methods set it.
- ``sem_unsupported``: why the method gets no ``<name>_sem`` twin, or None when it gets one.
- ``train_batch_sampler(cfg, dataset)``: the batch sampler of the training DataLoader, or None for
  solo-learn's shuffled batches. A sampler returned here also splits the data over DDP ranks.
- ``extra_evaluations(checkpoint, settings)``: representations ``solo-diet compare`` measures
  besides the backbone (:class:`ExtraRepresentation`).
- ``views``: the large crops per sample the method trains on in its recipe (DIET and s-DIET one,
  CPLearn two); the suite's smoke runs use it.
- ``smoke_kwargs``: ``method_kwargs`` that make the method small enough for a CPU smoke run; the
  suite runs every registered method through each data path, its SEM twin and the read-back guard
  with them (plus ``num_samples`` when it uses sample indexes).

The registry checks a declaration when it registers the class (:func:`registered_class`): a plugin
class must declare its own, and one that inherits two different contracts is refused, so the order
of the base classes never decides. With ``strict_method_kwargs`` the registry makes the class's
``add_and_assert_specific_cfg`` record, through a recording view of the cfg
(:mod:`solo_diet.methods.recording`), every key read by whoever reads it (``fill_default``,
solo-learn's ``omegaconf_select``, attribute access) and refuse the unread ones.

Launchers read a class's contract through :func:`method_contract`, which also answers for classes
that declare none (solo-learn's own methods): they get :data:`DEFAULT_CONTRACT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import omegaconf
from torch import nn

from solo_diet.config import check_known_keys
from solo_diet.methods.recording import is_recording, recorded_reads

if TYPE_CHECKING:
    from torch.utils.data import Sampler

# ``extra_evaluations``' first argument: a ``solo_diet.methods.checkpoint.PretrainedCheckpoint``
# (not imported: loading a checkpoint registers the methods, which checks their contracts)
Checkpoint = Any


@dataclass(frozen=True)
class ExtraRepresentation:
    """A representation ``solo-diet compare`` measures besides the backbone; its result columns are
    prefixed with ``name``.

    ``kind="features"``: ``encoder(images)`` are features; compare reports their kNN top-1, RankMe,
    LiDAR and spectrum (``<name>_knn_acc1``, ...) and, when ``probe_overrides`` is not empty, the
    top-1 of ``solo-diet linear`` run with those overrides (``<name>_linear_acc1``).
    ``kind="codes"``: ``encoder(images)`` is one integer code per image (shape ``(B, 1)``), scored
    as a clustering of the val split (``<name>_nmi``, ``<name>_ami``, ``<name>_used``).
    """

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
    return None


def no_extra_evaluations(
    checkpoint: Checkpoint, settings: Mapping[str, Any]
) -> list[ExtraRepresentation]:
    """The default ``extra_evaluations``: nothing besides the backbone."""
    return []


class ContractError(TypeError):
    """A method class declares no contract, a malformed one, or inherits two different ones."""


@dataclass(frozen=True)
class Contract:
    """A method class's answers to the launchers, compare and the tests (module docstring)."""

    uses_sample_indexes: bool = False
    strict_method_kwargs: bool = False
    sem_unsupported: Optional[str] = None
    train_batch_sampler: Callable[[omegaconf.DictConfig, Sequence[Any]], Optional["Sampler"]] = (
        no_batch_sampler
    )
    extra_evaluations: Callable[[Checkpoint, Mapping[str, Any]], list[ExtraRepresentation]] = (
        no_extra_evaluations
    )
    views: int = 2
    smoke_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("uses_sample_indexes", "strict_method_kwargs"):
            if not isinstance(getattr(self, name), bool):
                raise ContractError(
                    f"Contract.{name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.sem_unsupported is not None and not isinstance(self.sem_unsupported, str):
            raise ContractError(
                f"Contract.sem_unsupported must be a reason or None, got {self.sem_unsupported!r}"
            )
        for name in ("train_batch_sampler", "extra_evaluations"):
            if not callable(getattr(self, name)):
                raise ContractError(
                    f"Contract.{name} must be callable, got {getattr(self, name)!r}"
                )
        if isinstance(self.views, bool) or not isinstance(self.views, int) or self.views < 1:
            raise ContractError(f"Contract.views must be a positive integer, got {self.views!r}")
        if not isinstance(self.smoke_kwargs, Mapping):
            raise ContractError(
                f"Contract.smoke_kwargs must be a mapping, got {self.smoke_kwargs!r}"
            )


DEFAULT_CONTRACT = Contract()
"""The contract of a class that declares none (solo-learn's own methods)."""


def method_contract(method_cls: type) -> Contract:
    """The contract ``method_cls`` declares in its body, else the one its bases declare (all the
    same one: two different ones are refused), else :data:`DEFAULT_CONTRACT`."""
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


def registered_class(method_cls: type, *, plugin: bool) -> type:
    """Registration's check of ``method_cls``: its contract is well formed and, for a ``plugin``
    class, declared in its own body; with ``strict_method_kwargs`` its
    ``add_and_assert_specific_cfg`` then refuses ``method_kwargs`` keys it did not read.
    Idempotent; returns the class."""
    if plugin and "contract" not in method_cls.__dict__:
        raise ContractError(
            f"{method_cls.__module__}.{method_cls.__qualname__} declares no method contract: add "
            "the class attribute `contract = Contract(...)` (solo_diet.methods.contract), e.g. "
            "`contract = IndexMethod.contract` for an index-based method."
        )
    if method_contract(method_cls).strict_method_kwargs:
        own = method_cls.__dict__.get("add_and_assert_specific_cfg")
        if not getattr(getattr(own, "__func__", None), "refuses_unread_keys", False):
            method_cls.add_and_assert_specific_cfg = _refusing_unread_keys(method_cls, own)
    return method_cls


def _refusing_unread_keys(method_cls: type, own: Any) -> classmethod:
    """``method_cls``'s ``add_and_assert_specific_cfg`` (its own ``own``, else its base's) run on a
    recording view of the cfg; a ``method_kwargs`` key it did not read is refused afterwards. An
    inner call (a base or twin's) finds the view already recording and only fills."""

    def add_and_assert_specific_cfg(cls: type, cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        fill = (
            own.__get__(None, cls)
            if own is not None
            else super(method_cls, cls).add_and_assert_specific_cfg
        )
        if is_recording(cfg) or not method_contract(cls).strict_method_kwargs:
            return fill(cfg)
        with recorded_reads(cfg) as reads:
            cfg = fill(cfg)
        known = {key.split(".")[1] for key in reads if key.startswith("method_kwargs.")}
        check_known_keys(cfg, "method_kwargs", known, f"method `{cfg.method}`")
        return cfg

    add_and_assert_specific_cfg.refuses_unread_keys = True  # type: ignore[attr-defined]
    add_and_assert_specific_cfg.__doc__ = getattr(own, "__doc__", None)
    return classmethod(add_and_assert_specific_cfg)
