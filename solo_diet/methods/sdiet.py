"""s-DIET as a solo-learn method (s-DIET paper, §5): the head and its optimiser state live in a
``RowStore`` outside the module's parameters and DDP, stepped by ``RowHead`` in the order of
``SuperBatchOrder`` (docs/methods/sdiet.md)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Dict, Optional, Sequence

import omegaconf
import torch
from solo.utils.misc import concat_all_gather_no_grad, gather, omegaconf_select
from torch.nn import functional as F

from solo_diet.core.errors import ConfigError
from solo_diet.core.sdiet import rowstore, samplers
from solo_diet.core.sdiet.optim import RowAdamW, RowOptimizer, RowSGDW
from solo_diet.core.sdiet.rowstore import RowStore, ShardedRowStore
from solo_diet.core.sdiet.samplers import RowHead, SuperBatch, SuperBatchOrder, SuperBatchSampler
from solo_diet.core.settings import KeyReader, core_errors_named, is_number, setting
from solo_diet.methods._common import SOLO_LEARN_SEED, online_probe_loss
from solo_diet.methods.index_method import (
    INDEX_ARGUMENT_KEYS,
    IndexKwargs,
    IndexMethod,
    check_sample_indexes,
)

CHECKPOINT_KEY = "sdiet_row_store"


def _optimizer_kwarg(name: str, default: Any) -> Callable[[omegaconf.DictConfig], Any]:
    """A head setting's default: the backbone optimizer's ``optimizer.kwargs.<name>``."""
    return lambda cfg: (omegaconf_select(cfg, "optimizer.kwargs", {}) or {}).get(name, default)


@dataclass(frozen=True)
class SDIETKwargs(IndexKwargs):
    """s-DIET's ``method_kwargs`` besides :class:`IndexKwargs` (docs/methods/sdiet.md)."""

    label_smoothing: float = setting(0.8, within=(0.0, 1.0))
    temperature: float = setting(1.0, within=(1e-6, math.inf))
    head_optimizer: str = setting("adamw", choices=("adamw", "sgdw"))
    head_weight_decay: float = setting(
        within=(0.0, math.inf),
        derive=lambda cfg: omegaconf_select(cfg, "optimizer.weight_decay", 0.0),
    )
    head_betas: Any = setting(derive=_optimizer_kwarg("betas", [0.9, 0.999]))
    head_eps: float = setting(within=(0.0, math.inf), derive=_optimizer_kwarg("eps", 1e-8))
    head_momentum: float = setting(within=(0.0, 1.0), derive=_optimizer_kwarg("momentum", 0.9))
    zero_grad_steps: str = setting(
        choices=rowstore.MODES,
        derive=lambda cfg: (
            "eager"
            if omegaconf_select(cfg, "method_kwargs.labels", IndexKwargs.labels) == "index"
            else "lazy"
        ),
    )
    row_placement: str = setting("cpu", choices=rowstore.PLACEMENTS)
    row_dir: Optional[str] = None
    row_dtype: str = setting("float32", choices=("float32", "float64"))
    rows_per_step: int = setting(1, minimum=1, hint="1 is the paper's batch CE.")
    prefetch: bool = True
    row_sharding: str = setting("none", choices=("none", "node"))

    def checked(self, cfg: omegaconf.DictConfig) -> "SDIETKwargs":
        """The head's betas and the combinations s-DIET refuses."""
        betas = self.head_betas
        betas = list(betas) if isinstance(betas, Sequence) and not isinstance(betas, str) else []
        if len(betas) != 2 or not all(is_number(b) and 0.0 <= b < 1.0 for b in betas):
            raise ConfigError(
                "`method_kwargs.head_betas` must be two numbers in [0, 1), got "
                f"{betas or self.head_betas!r}."
            )
        if self.row_placement == "disk" and not self.row_dir:
            raise ConfigError(
                "`method_kwargs.row_placement=disk` needs `method_kwargs.row_dir` (a folder for "
                "the row files)."
            )
        if self.labels != "index" and self.zero_grad_steps == "eager":
            raise ConfigError(
                f"`method_kwargs.zero_grad_steps=eager` needs `method_kwargs.labels=index` (one "
                f"visit per row and epoch), got `labels={self.labels}`: set `zero_grad_steps=lazy`."
            )
        if self.labels != "index" and self.rows_per_step != 1:
            raise ConfigError(
                f"`method_kwargs.rows_per_step` > 1 needs `method_kwargs.labels=index` (rows "
                f"known ahead), got `labels={self.labels}`: set `method_kwargs.rows_per_step=1`."
            )
        if cfg.data.num_large_crops != 1 or omegaconf_select(cfg, "data.num_small_crops", 0) != 0:
            raise ConfigError(
                "s-DIET trains on one view per sample: set `data.num_large_crops=1`, "
                "`data.num_small_crops=0` and one augmentation pipeline with `num_crops: 1`."
            )
        return replace(self, head_betas=tuple(float(b) for b in betas))


class SDIET(IndexMethod):
    """s-DIET: projector (3 layers, s-DIET paper, §6), L2 normalisation, CE against the resident
    head rows (Eq. 7, §5.2), a datum's label id its row; ``seed`` seeds the rows and batch order.

    Keys, parsed once into ``self.hp``: :class:`SDIETKwargs` ``label_smoothing``, ``temperature``,
    the head's optimiser ``head_optimizer``, ``head_weight_decay``, ``head_betas``, ``head_eps``,
    ``head_momentum`` (defaults: ``optimizer.weight_decay`` and ``optimizer.kwargs``),
    ``zero_grad_steps``, the row store's ``row_placement``, ``row_dir``, ``row_dtype``,
    ``rows_per_step``, ``prefetch``, ``row_sharding``; from :class:`IndexKwargs` ``num_samples``,
    ``labels``, ``labelled_fraction``, ``label_seed``, ``groups_path``, ``proj_layers``,
    ``proj_hidden_dim``, ``proj_output_dim``, ``proj_use_bn``.
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    registered_as = "sdiet"
    # the head rows' keys before: "storage" now names where the GPU data path keeps its images
    renamed_method_kwargs: ClassVar[dict[str, str]] = {
        "storage": "row_placement",
        "storage_dir": "row_dir",
        "storage_dtype": "row_dtype",
    }
    hp: SDIETKwargs

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        hp = self.hp
        self.seed: int = omegaconf_select(cfg, "seed", SOLO_LEARN_SEED)
        self.head_optimizer: RowOptimizer = (
            RowAdamW(hp.head_weight_decay, hp.head_betas, hp.head_eps)
            if hp.head_optimizer == "adamw"
            else RowSGDW(hp.head_weight_decay, hp.head_momentum)
        )
        self.row_head = RowHead(hp.rows_per_step, hp.label_smoothing, hp.temperature, hp.prefetch)
        # plain attributes: Lightning never moves, syncs or saves them
        self._row_store: Optional[RowStore] = None
        self._pending_snapshot: Optional[dict] = None  # loaded by the next use of row_store
        self.super_batch_sampler: Optional[SuperBatchSampler] = None
        self.batch_order = SuperBatchOrder(hp.rows_per_step)

    @staticmethod
    def train_batch_sampler(cfg: omegaconf.DictConfig, dataset: Sequence[Any]) -> SuperBatchSampler:
        """Contract hook ``train_batch_sampler``: the seeded super-batch order of ``dataset``."""
        rows = KeyReader(cfg).int("method_kwargs.rows_per_step", default=SDIETKwargs.rows_per_step)
        seed = omegaconf_select(cfg, "seed", SOLO_LEARN_SEED)
        return SuperBatchSampler(len(dataset), cfg.optimizer.batch_size, rows, seed=seed)

    contract = replace(
        IndexMethod.contract,
        kwargs=SDIETKwargs,
        train_batch_sampler=train_batch_sampler,
        step_graph_unsupported="its head rows are staged from the host row store per step",
    )

    @property
    def row_store(self) -> RowStore:
        """The head rows and their optimiser state, made on first use."""
        if self._row_store is None:
            hp, placement, trainer = self.hp, self.hp.row_placement, self._trainer
            nodes = 1 if trainer is None else trainer.num_nodes
            node = 0 if trainer is None else trainer.node_rank
            sharing = rowstore.host_sharing(node=node) if placement in ("cpu", "disk") else None
            if sharing is not None and self.label_source.source != "index":
                raise ConfigError(
                    f"`method_kwargs.labels={self.label_source.source}` with several processes "
                    "needs `method_kwargs.row_placement=gpu`: a host-shared store writes one step "
                    "late, and class rows recur in consecutive batches."
                )
            shard = None  # row_sharding=node over several nodes: this node's part of the rows
            if hp.row_sharding == "node" and nodes > 1:
                part = (trainer.global_rank, trainer.world_size, True)
                if sharing is not None:  # a host-shared store: the node's part, one writer
                    part = (node, nodes, sharing.writer)
                shard = rowstore.node_shard(*part, self.device)
            directory = hp.row_dir
            if directory and nodes > 1:
                directory = os.path.join(directory, f"node{node}")
            self._row_store = (RowStore if shard is None else ShardedRowStore)(
                self.label_source.num_rows,
                self.z_dim,
                self.head_optimizer,
                device=self.device,
                mode=hp.zero_grad_steps,
                placement=placement,
                directory=directory,
                dtype=getattr(torch, hp.row_dtype),
                seed=self.seed,
                sharing=sharing,
                shard=shard,
            )
        if self._pending_snapshot is not None:
            self._row_store.load_state_dict(self._pending_snapshot)
            self._pending_snapshot = None
        return self._row_store

    def head_input(self, feats: torch.Tensor) -> torch.Tensor:
        """``z``: the L2-normalised projector output (rows stepped by hand, as Listing 1)."""
        return F.normalize(self.projector(feats), dim=-1)

    def on_train_start(self) -> None:
        """Finds the sampler; eager mode: ``T = N/B - m`` zero-gradient steps per visit (§5.2)."""
        super().on_train_start()
        if self.super_batch_sampler is None:
            found = getattr(self.trainer.train_dataloader, "batch_sampler", None)
            self.super_batch_sampler = found if isinstance(found, SuperBatchSampler) else None
        hp, global_batch = self.hp, self.batch_size * self.trainer.world_size
        with core_errors_named(INDEX_ARGUMENT_KEYS):
            samplers.check_sampler(self.super_batch_sampler, hp.num_samples, hp.rows_per_step)
        self.row_store.eager_steps = max(hp.num_samples / global_batch - hp.rows_per_step, 0.0)

    def _super_batch(self, indexes: torch.Tensor, batch_idx: int) -> SuperBatch:
        """This global batch's super-batch (no SuperBatchSampler: the batch, checked)."""
        sampler = self.super_batch_sampler
        if sampler is not None:
            steps = math.inf if self._trainer is None else self.trainer.num_training_batches
            return self.batch_order.locate(sampler, indexes, batch_idx, steps)
        check_sample_indexes(indexes, self.hp.num_samples)
        if indexes.unique().numel() != indexes.numel():
            raise ValueError(
                "s-DIET needs distinct dataset indices in a (global) batch: two samples would "
                "share one head row. Use a sampler without replacement (solo-learn's default)."
            )
        return SuperBatch(indexes, 0, 1, None)

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """CE over the batch's head rows, stepped by hand, + online probe; returns the loss."""
        indexes, targets = batch[0], batch[2]
        out = super().training_step(batch, batch_idx)
        z = gather(out["z"][0])
        # the head's lr: the backbone group's scheduled one (outside a Trainer: the configured one)
        optimizers = [] if self._trainer is None else self.trainer.optimizers
        lr = optimizers[0].param_groups[0]["lr"] if optimizers else self.lr
        if self.label_source.source == "index":
            # a collective: every process has loaded the previous rows before the writer stores them
            indexes = concat_all_gather_no_grad(indexes)
            super_batch = self._super_batch(indexes, batch_idx)
            loss = self.row_head.index_step(self.row_store, z, super_batch, lr, batch_idx)
        else:  # batch CE over the distinct label rows, lazy zero-gradient steps
            ids = concat_all_gather_no_grad(self.label_source(indexes, targets))
            loss = self.row_head.labelled_step(self.row_store, z, ids, lr)
        # a device tensor by a fill kernel: a logged float would copy host -> device each step
        logs = {"train_sdiet_loss": loss, "train_head_lr": torch.full((), lr, device=z.device)}
        self.log_dict(logs, on_epoch=True, sync_dist=True)
        return loss + online_probe_loss(targets, out["loss"])

    def on_train_epoch_end(self) -> None:
        """The last batch's order check; the last write-back lands before the next epoch."""
        self.batch_order.check_pending()
        self.row_store.synchronize()

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        """The rows, state and counters go with the checkpoint (global rank 0 keeps them)."""
        keep, store = self._trainer is None or self.trainer.is_global_zero, self.row_store
        state = store.state_dict(keep=keep) if isinstance(store, ShardedRowStore) else None
        if keep:
            checkpoint[CHECKPOINT_KEY] = state or store.state_dict()

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        """The rows saved by :meth:`on_save_checkpoint`, loaded by the next use of the store."""
        self._pending_snapshot = checkpoint.get(CHECKPOINT_KEY, self._pending_snapshot)
