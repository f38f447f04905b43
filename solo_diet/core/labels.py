"""Label sources: the same loss with different labels (Birth-of-SSL paper, Thm. 1, Prop. 1); one
id per datum, -1: none (docs/methods/label-sources.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np
import torch
from torch import nn

from solo_diet.core.errors import Argument, ArgumentError, ArgumentIndexError

LABEL_SOURCES = ("index", "class", "mix", "groups")

# the keys (and defaults) of the mapping :func:`label_source_from_kwargs` reads
LABEL_DEFAULTS: dict[str, Any] = dict(
    labels="index", labelled_fraction=1.0, label_seed=0, groups_path=None
)


class LabelSource(nn.Module):
    """``(indexes, targets) -> ids`` in ``[0, num_rows)`` by ``source``: ``index`` (Prop. 1),
    ``class``, ``mix`` (the class where known, else ``num_classes`` + the index) or ``groups`` (the
    ``(N,)`` ids of ``groups``); ``class``/``mix`` keep a ``labelled_fraction`` of the targets,
    seeded by ``label_seed``."""

    def __init__(
        self,
        source: str,
        num_samples: int,
        num_classes: Optional[int] = None,
        groups: Optional[torch.Tensor] = None,
        labelled_fraction: float = 1.0,
        label_seed: int = 0,
    ):
        super().__init__()
        if source not in LABEL_SOURCES:
            raise ArgumentError(
                Argument("source"), f" must be one of {list(LABEL_SOURCES)}, got {source!r}."
            )
        if source in ("class", "mix") and (num_classes is None or num_classes < 1):
            raise ArgumentError(
                Argument("source", f": {source}"),
                " needs ",
                Argument("num_classes"),
                f" >= 1, got {num_classes!r}.",
            )
        if not 0.0 < labelled_fraction <= 1.0:
            raise ArgumentError(
                Argument("labelled_fraction"), f" must be in (0, 1], got {labelled_fraction!r}."
            )
        self.source, self.num_samples = source, int(num_samples)
        self.num_classes = int(num_classes or 0)
        group_rows = torch.zeros(0, dtype=torch.long)
        if source == "groups":
            group_rows = _renumbered_groups(groups, self.num_samples)
        self.register_buffer("group_rows", group_rows, persistent=False)

        keep = torch.ones(self.num_samples if labelled_fraction < 1.0 else 0, dtype=torch.bool)
        if labelled_fraction < 1.0:
            generator = torch.Generator().manual_seed(label_seed)
            num_kept = round(labelled_fraction * self.num_samples)
            keep[torch.randperm(self.num_samples, generator=generator)[num_kept:]] = False
        self.register_buffer("keep_label", keep, persistent=False)

    @property
    def num_rows(self) -> int:
        """Number of head rows = number of possible ids."""
        return {
            "index": self.num_samples,
            "class": self.num_classes,
            "mix": self.num_classes + self.num_samples,
            "groups": int(self.group_rows.max()) + 1 if self.group_rows.numel() else 0,
        }[self.source]

    @property
    def has_unlabelled(self) -> bool:
        """Whether some data can get id ``-1`` (only ``class``: ``mix`` falls back to the index)."""
        return self.source == "class"

    def forward(self, indexes: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``(B,)`` long ids in ``[0, num_rows)``, or ``-1`` for a datum without a label."""
        indexes = indexes.long()
        fix = "It must be the training set's size."
        check_range(indexes, 0, self.num_samples, "dataset index", "num_samples", fix)
        if self.source == "index":
            return indexes
        if self.source == "groups":
            return self.group_rows[indexes]
        targets = targets.long()
        fix = "Set it to the dataset's number of classes; -1 marks an unlabelled datum."
        check_range(targets, -1, self.num_classes, "target", "num_classes", fix)
        if self.keep_label.numel():
            targets = torch.where(self.keep_label[indexes], targets, torch.full_like(targets, -1))
        if self.source == "class":
            return targets
        return torch.where(targets >= 0, targets, self.num_classes + indexes)


def device_range_message(what: str, low: int, high: int, key: str) -> str:
    """The device assert's message (CUDA's asynchronous assert takes under 255 characters)."""
    return f"batch has a {what} outside [{low}, {high}) (argument `{key}`)"[:254]


def check_range(
    values: torch.Tensor,
    low: int,
    high: int,
    what: str,
    key: str,
    fix: str,
    device_key: Optional[str] = None,
) -> None:
    """Refuse values outside ``[low, high)`` (set by ``key``): an ``IndexError`` on the host, on a
    GPU an asynchronous device assert (no wait) naming ``device_key`` (default ``key``)."""
    if values.numel() == 0:
        return
    if values.device.type != "cpu":
        inside = ((values >= low) & (values < high)).all()
        torch._assert_async(inside, device_range_message(what, low, high, device_key or key))
        return
    smallest, largest = torch.stack(torch.aminmax(values)).tolist()
    if smallest < low or largest >= high:
        bad = smallest if smallest < low else largest
        raise ArgumentIndexError(
            f"batch has {what} {bad} outside [{low}, {high}) (", Argument(key), f" = {high}). {fix}"
        )


def _renumbered_groups(groups: Optional[torch.Tensor], num_samples: int) -> torch.Tensor:
    """Group ids renumbered ``0..G-1`` (sorted order), one per datum."""
    if groups is None:
        raise ArgumentError(
            Argument("source", ": groups"),
            " needs ",
            Argument("groups"),
            " (an index -> group id array).",
        )
    groups = torch.as_tensor(groups)
    if groups.dtype.is_floating_point or groups.dtype == torch.bool or groups.dim() != 1:
        raise ArgumentError(
            Argument("groups"),
            f" must be a 1-D integer array, got dtype {groups.dtype}, shape {tuple(groups.shape)}.",
        )
    if groups.numel() != num_samples:
        raise ArgumentError(
            f"the groups array has {groups.numel()} entries but the training set has {num_samples} "
            "samples (",
            Argument("num_samples"),
            "): it needs one group id per dataset index.",
        )
    if (low := int(groups.min())) < 0:
        raise ArgumentError(Argument("groups"), f": group ids must be >= 0, got {low}.")
    return torch.unique(groups.long(), return_inverse=True)[1]


def load_groups(groups_path: Union[str, Path]) -> torch.Tensor:
    """Read an ``index -> group id`` array from ``.npy``, ``.pt`` or ``.txt`` (one id a line)."""
    path = Path(groups_path)
    if not path.is_file():
        raise ArgumentError(Argument("groups_path"), f" {str(path)!r} is not a file.")
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path))
    if path.suffix == ".pt":
        return torch.as_tensor(torch.load(path, map_location="cpu", weights_only=True))
    if path.suffix == ".txt":
        return torch.from_numpy(np.loadtxt(path, dtype=np.int64, ndmin=1))
    raise ArgumentError(
        Argument("groups_path"), f" must end in .npy, .pt or .txt, got {str(path)!r}."
    )


def label_source_from_kwargs(
    kwargs: Mapping[str, Any], num_classes: Optional[int], has_labels: bool = True
) -> LabelSource:
    """The label source ``kwargs`` ask for (``class``/``mix`` need ``has_labels``)."""
    source = kwargs["labels"]
    if source in ("class", "mix") and not has_labels:
        raise ArgumentError(
            Argument("kwargs", f".labels={source}"),
            " needs class targets but the dataset has none (see ",
            Argument("has_labels"),
            "): use `labels=index`, or `labels=groups` with a groups file.",
        )
    if source != "groups" and kwargs["groups_path"] is not None:
        raise ArgumentError(
            Argument("kwargs", ".groups_path"),
            f" is only read with `labels=groups`, got labels={source!r}.",
        )
    if source not in ("class", "mix") and kwargs["labelled_fraction"] != 1.0:
        raise ArgumentError(
            Argument("kwargs", ".labelled_fraction"),
            " only applies to `labels=class` or `labels=mix`.",
        )
    path = kwargs["groups_path"]
    return LabelSource(
        source,
        num_samples=kwargs["num_samples"],
        num_classes=num_classes,
        groups=load_groups(path) if source == "groups" and path is not None else None,
        labelled_fraction=float(kwargs["labelled_fraction"]),
        label_seed=int(kwargs["label_seed"]),
    )


def batch_rows(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, positions)``: the batch's distinct ids ``>= 0``, each datum's position."""
    labelled = ids >= 0
    rows, inverse = torch.unique(ids[labelled], return_inverse=True)
    positions = torch.full_like(ids, -1)
    positions[labelled] = inverse
    return rows, positions
