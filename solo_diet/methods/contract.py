"""The method contract: what the launchers and ``solo-diet compare`` may ask a method class.

A method declares its hooks by subclassing :class:`MethodContract` (next to solo-learn's
``BaseMethod``) and overriding what differs from the defaults:

- ``uses_sample_indexes``: the method reads the dataset index of each sample (``batch[0]``), so
  ``solo-diet pretrain`` sets ``method_kwargs.num_samples`` to the training set's size and refuses
  data paths that do not deliver real indices (DALI without ``encode_indexes_into_labels``).
- ``train_batch_sampler(cfg, dataset)``: the batch sampler of the training DataLoader, or None for
  solo-learn's shuffled batches. A sampler returned here also splits the data over DDP ranks.
- ``sem_unsupported``: why the method gets no ``<name>_sem`` twin, or None when it gets one.
- ``extra_evaluations(checkpoint, settings)``: representations ``solo-diet compare`` measures
  besides the backbone (:class:`ExtraRepresentation`).
- ``strict_method_kwargs``: every key of the method's ``method_kwargs`` gets its default through
  ``solo_diet.config.fill_default``, so a key none was filled for is a typo, refused when the
  method is built (``method_kwargs.label_smooting`` names ``label_smoothing``). Our methods set it.

Launchers read a class's contract through :func:`method_contract`, which also answers for classes
that do not subclass :class:`MethodContract` (solo-learn's own methods): they get the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional, Sequence

import omegaconf
from torch import nn

from solo_diet.config import check_known_keys, filled_keys

if TYPE_CHECKING:
    from torch.utils.data import Sampler

    from solo_diet.methods.checkpoint import PretrainedCheckpoint


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


class MethodContract:
    """Mixin of the hooks a method declares; every hook has a default (module docstring)."""

    uses_sample_indexes: ClassVar[bool] = False
    sem_unsupported: ClassVar[Optional[str]] = None
    strict_method_kwargs: ClassVar[bool] = False

    def __init__(self, cfg: omegaconf.DictConfig, *args: Any, **kwargs: Any) -> None:
        """solo-learn's ``BaseMethod.__init__`` (it runs ``add_and_assert_specific_cfg``); then,
        with ``strict_method_kwargs``, a ``method_kwargs`` key that got no default is refused."""
        if not self.strict_method_kwargs:
            super().__init__(cfg, *args, **kwargs)
            return
        with filled_keys() as filled:
            super().__init__(cfg, *args, **kwargs)
        known = {key.split(".")[1] for key in filled if key.startswith("method_kwargs.")}
        check_known_keys(self.cfg, "method_kwargs", known, f"method `{self.cfg.method}`")

    @staticmethod
    def train_batch_sampler(
        cfg: omegaconf.DictConfig, dataset: Sequence[Any]
    ) -> Optional["Sampler"]:
        """The training DataLoader's batch sampler, or None for solo-learn's default."""
        return None

    @classmethod
    def extra_evaluations(
        cls, checkpoint: "PretrainedCheckpoint", settings: Mapping[str, Any]
    ) -> list[ExtraRepresentation]:
        """What compare measures besides the backbone of ``checkpoint``; ``settings`` is the
        comparison's ``evaluation`` section. Default: nothing."""
        return []


@dataclass(frozen=True)
class Contract:
    """A method class's answers to the contract (:func:`method_contract`)."""

    uses_sample_indexes: bool
    sem_unsupported: Optional[str]
    train_batch_sampler: Callable[[omegaconf.DictConfig, Sequence[Any]], Optional["Sampler"]]
    extra_evaluations: Callable[
        ["PretrainedCheckpoint", Mapping[str, Any]], list[ExtraRepresentation]
    ]


def method_contract(method_cls: type) -> Contract:
    """The contract of any registered method class; classes that do not declare a hook (solo-learn's
    own methods) get :class:`MethodContract`'s default for it."""
    return Contract(
        **{
            name: getattr(method_cls, name, getattr(MethodContract, name))
            for name in (
                "uses_sample_indexes",
                "sem_unsupported",
                "train_batch_sampler",
                "extra_evaluations",
            )
        }
    )
