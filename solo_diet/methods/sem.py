"""Simplicial Embeddings (Lavoie et al., ICLR 2023, §3) as a ``<name>_sem`` twin of every method:
``SEM<M>`` is ``(_SEMTwin, M)``; ``M`` builds its projector/head for ``features_dim`` = L*V, which
the twin wraps as ``SEMThenHead(embedder, original)`` (keys: :class:`SEMKwargs`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.utils.momentum import initialize_momentum_params
from torch import nn

from solo_diet.core.errors import ConfigError
from solo_diet.core.nn import SimplicialEmbedding, simplex_statistics
from solo_diet.core.nn.sem import SEMFeatureExtractor, SEMProbe, SEMThenHead, check_temperature
from solo_diet.core.settings import parse_section, setting, write_section
from solo_diet.methods.checkpoint import PretrainedCheckpoint
from solo_diet.methods.contract import DeclaredKwargs, ExtraRepresentation, method_contract


@dataclass(frozen=True)
class SEMKwargs:
    """The ``method_kwargs.sem`` settings (SEM paper defaults, App. C; docs/methods/sem.md):
    ``tau_online`` is tau_p, ``tau_target`` tau'_p (None: ``tau_online``), ``probe`` what the online
    classifier reads (the backbone's e, or SEM at ``probe_tau``, tau_d; 0 = one-hot argmax)."""

    owner: ClassVar[str] = "SEM"
    num_simplices: int = setting(5000, minimum=1, hint="It is L, the number of simplices.")
    simplex_dim: int = setting(
        13, minimum=2, hint="It is V, the size of each simplex (a 1-entry simplex is constant 1)."
    )
    tau_online: float = 1.0
    tau_target: Optional[float] = None
    probe: str = setting("backbone", choices=("backbone", "sem"))
    probe_tau: float = 0.1

    def checked(self, cfg: omegaconf.DictConfig) -> "SEMKwargs":
        """Finite temperatures, > 0 (``probe_tau`` >= 0); ``tau_target`` filled in."""
        target = self.tau_online if self.tau_target is None else self.tau_target
        taus = {"tau_online": self.tau_online, "tau_target": target, "probe_tau": self.probe_tau}
        try:
            for key, tau in taus.items():
                taus[key] = check_temperature(tau, f"`method_kwargs.sem.{key}`", key == "probe_tau")
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from err
        return replace(self, **taus)


def with_sem(kwargs: Optional[type]) -> type:
    """The kwargs dataclass of a twin: ``sem`` and the base method's ``kwargs`` (if any)."""

    def checked(self: Any, cfg: omegaconf.DictConfig) -> Any:
        base = getattr(kwargs, "checked", None)
        own = self if base is None else base(self, cfg)
        return replace(own, sem=self.sem.checked(cfg))

    return make_dataclass(
        f"SEM{getattr(kwargs, '__name__', 'OnlyKwargs')}",
        [("sem", SEMKwargs, field(default_factory=SEMKwargs))],
        bases=() if kwargs is None else (kwargs,),
        namespace={"checked": checked},
        frozen=True,
    )


# the ``self.hp`` of a solo-learn method's twin: ``sem`` alone (solo-learn reads the rest)
SEMOnlyKwargs = with_sem(None)


REFUSED: dict[str, str] = {
    "base": "BaseMethod has no self-supervised projector or head for SEM to feed.",
    "linear": (
        "linear evaluation is not pretraining; probe a SEM checkpoint through "
        "sem_feature_extractor()."
    ),
    "mae": "MAE has no projector (its decoder reads patch tokens), so SEM has no place in it.",
}


class SEMUnsupported(ValueError):
    """The method cannot get a SEM twin (no projector/head fed by features_dim, or refused)."""


def sem_refusal(name: str, method_cls: type) -> str | None:
    """Why ``method_cls`` (registered as ``name``) gets no ``<name>_sem`` twin, or None."""
    if name in REFUSED:
        return REFUSED[name]
    if not (isinstance(method_cls, type) and issubclass(method_cls, BaseMethod)):
        return f"{method_cls!r} is not a solo-learn BaseMethod subclass."
    if method_cls in (BaseMethod, BaseMomentumMethod) or name.endswith("_sem"):
        return "it is a base class or already a SEM twin."
    return method_contract(method_cls).sem_unsupported


class _BackbonesForMethod:
    """solo-learn's backbone registry for a twin: factories get the base method's name."""

    def __init__(self, method_name: str):
        self.method_name = method_name

    def __getitem__(self, name: str) -> Callable[..., nn.Module]:
        return partial(self.build, BaseMethod._BACKBONES[name])

    def build(self, factory: Callable[..., nn.Module], _twin_name: str, **kwargs) -> nn.Module:
        """``factory``'s backbone for the base method (solo-learn passes the twin's name)."""
        return factory(self.method_name, **kwargs)


def _slot_paths(model: nn.Module) -> tuple[str, str | None]:
    """(online, momentum) module paths SEM feeds: ``projector`` or ``head`` (DINO: ``head.mlp``)."""
    for online, momentum in (("projector", "momentum_projector"), ("head", "momentum_head")):
        module = getattr(model, online, None)
        if isinstance(module, nn.Module):
            suffix = ".mlp" if isinstance(getattr(module, "mlp", None), nn.Module) else ""
            has_momentum = isinstance(getattr(model, momentum, None), nn.Module)
            return online + suffix, (momentum + suffix if has_momentum else None)
    raise SEMUnsupported(
        f"{type(model).__name__} has no `projector` or `head` module for SEM to feed; set the "
        "contract `Contract(sem_unsupported='<reason>')` to keep it out of the SEM twins."
    )


def _reads_width(slot: nn.Module, model: nn.Module, width: int) -> bool:
    """Whether the slot's first Linear (or a later one, past an Identity) takes ``width`` inputs."""
    first = next((m.in_features for m in slot.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        return any(isinstance(m, nn.Linear) and m.in_features == width for m in model.modules())
    return first == width


def _with_sem_representation(
    base_evaluations: Callable[..., list[ExtraRepresentation]],
    checkpoint: PretrainedCheckpoint,
    settings: Mapping[str, Any],
) -> list[ExtraRepresentation]:
    """A twin's ``extra_evaluations``: the base method's, then the SEM representation."""
    tau = settings.get("sem_tau")
    probe = ("++probe=sem",) + (() if tau is None else (f"++sem_tau={tau}",))
    sem = ExtraRepresentation("sem", sem_feature_extractor(checkpoint, tau=tau), "features", probe)
    return base_evaluations(checkpoint, settings) + [sem]


class _SEMTwin:
    """The base of every ``<name>_sem`` twin (first in its MRO). Keys: the base method's and
    ``method_kwargs.sem`` (``self.hp.sem``, :class:`SEMKwargs`), in ``self.hp``."""

    sem_base_method: str
    _sem_online: str
    step_graph_state = ("_sem_large_crops",)  # what the step leaves for on_train_batch_end
    _sem_momentum: str | None

    @property
    def features_dim(self) -> int:
        """L*V of ``method_kwargs.sem``: the width the base method builds its projector/head for."""
        return self.hp.sem.num_simplices * self.hp.sem.simplex_dim

    @features_dim.setter
    def features_dim(self, backbone_dim: int) -> None:
        """solo-learn's base ``__init__`` assigns the backbone's D here: kept as backbone_dim."""
        self.backbone_dim = backbone_dim

    def __init__(self, cfg: omegaconf.DictConfig):
        if not isinstance(self, DeclaredKwargs):  # ours parse `sem` with their kwargs
            only = parse_section(SEMOnlyKwargs, cfg, "method_kwargs", SEMKwargs.owner, strict=False)
            self.hp = only.checked(cfg)  # before the base method reads features_dim
            write_section(cfg, "method_kwargs", self.hp)
        super().__init__(cfg)
        sem = self.hp.sem
        width, backbone_dim = self.features_dim, self.backbone_dim
        self._sem_online, self._sem_momentum = _slot_paths(self)
        if not _reads_width(self.get_submodule(self._sem_online), self, width):
            raise SEMUnsupported(
                f"{self.sem_base_method}: `{self._sem_online}` is not built from features_dim "
                f"(its first Linear does not take L*V = {width} inputs)."
            )
        shape = (backbone_dim, sem.num_simplices, sem.simplex_dim)  # D, L, V
        embedder = SimplicialEmbedding(*shape, sem.tau_online)
        online = self._wrap(self._sem_online, embedder)
        if self._sem_momentum is not None:
            momentum_embedder = SimplicialEmbedding(*shape, sem.tau_target)
            initialize_momentum_params(online, self._wrap(self._sem_momentum, momentum_embedder))
            paired = {id(p) for _, m in self.momentum_pairs for p in m.parameters()}
            if id(momentum_embedder.linear.weight) not in paired:
                raise SEMUnsupported(
                    f"{self.sem_base_method}: `{self._sem_momentum}` is not in momentum_pairs."
                )
        trained = {id(p) for group in self.learnable_params for p in group["params"]}
        if not {id(p) for p in embedder.parameters()} <= trained:
            raise SEMUnsupported(
                f"{self.sem_base_method}: `{self._sem_online}` is not in learnable_params."
            )
        # solo-learn built its classifiers for features_dim: they read the backbone (or SEM)
        if sem.probe == "sem":
            self.classifier = SEMProbe(embedder, sem.probe_tau, self.num_classes)
        else:
            self.classifier = nn.Linear(backbone_dim, self.num_classes)
        if getattr(self, "momentum_classifier", None) is not None:
            self.momentum_classifier = nn.Linear(backbone_dim, self.num_classes)
        self._sem_large_crops: list[torch.Tensor] = []

    def _wrap(self, path: str, embedder: SimplicialEmbedding) -> SEMThenHead:
        parent_path, _, name = path.rpartition(".")
        parent = self.get_submodule(parent_path)  # "" is the model itself
        setattr(parent, name, SEMThenHead(embedder, getattr(parent, name)))
        return getattr(parent, name)

    @property
    def sem_embedder(self) -> SimplicialEmbedding:
        """The online embedder (``BN(W e)`` + Eq. 1)."""
        return self.get_submodule(self._sem_online).embedder

    def _recording_sem(self, forward: Callable[..., dict], *args, **kwargs) -> dict[str, Any]:
        with self.get_submodule(self._sem_online).recording() as seen:
            out = forward(*args, **kwargs)
        if not seen:
            raise RuntimeError(
                f"{self.sem_base_method}_sem: forward did not call `{self._sem_online}`."
            )
        out["sem"] = seen[0]
        return out

    def forward(self, X: torch.Tensor, *args, **kwargs) -> dict[str, Any]:
        """solo-learn's outputs plus ``sem``: the SEM representation the projector/head read."""
        return self._recording_sem(super().forward, X, *args, **kwargs)

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        """As :meth:`forward`, for solo-learn's small crops."""
        return self._recording_sem(super().multicrop_forward, X)

    def base_training_step(self, X: torch.Tensor, targets: torch.Tensor) -> dict[str, Any]:
        """Crop 0 at ``tau_online``, the others at ``tau_target`` (SEM paper, §3.1)."""
        sem = self.hp.sem
        crop = len(self._sem_large_crops) % self.num_large_crops  # the step's crop
        tau = sem.tau_online if crop == 0 or self._sem_momentum is not None else sem.tau_target
        with self.get_submodule(self._sem_online).temperature(tau):
            out = super().base_training_step(X, targets)
        self._sem_large_crops.append(out["sem"].detach())
        return out

    def on_train_batch_end(self, outputs: Any, batch: Sequence[Any], batch_idx: int) -> None:
        """Logs the step's simplex statistics (SEM paper, §3.1, Fig. 2b)."""
        super().on_train_batch_end(outputs, batch, batch_idx)
        crops, self._sem_large_crops = self._sem_large_crops, []
        if crops:
            stats = simplex_statistics(torch.cat(crops), self.hp.sem.simplex_dim)
            logs = {f"train_sem_{k}": v for k, v in stats.items()}
            self.log_dict(logs, on_epoch=True, sync_dist=True)


def make_sem_twin(name: str, method_cls: type) -> type:
    """The ``<name>_sem`` class: ``method_cls`` with SEM before its projector/head."""
    reason = sem_refusal(name, method_cls)
    if reason is not None:
        raise SEMUnsupported(f"no SEM twin for method '{name}': {reason}")
    base = method_contract(method_cls)
    contract = replace(  # the base method's, with ``method_kwargs.sem`` and the SEM probe
        base,
        kwargs=None if base.kwargs is None else with_sem(base.kwargs),
        sem_unsupported="it is already a SEM twin.",
        extra_evaluations=partial(_with_sem_representation, base.extra_evaluations),
    )
    namespace = {  # type() takes this module as __module__ and the name as __qualname__
        "__doc__": f"{method_cls.__name__} with SEM before its projector/head ({name}_sem).",
        "sem_base_method": name,
        "contract": contract,
        "_BACKBONES": _BackbonesForMethod(name),
    }
    return type(f"SEM{method_cls.__name__}", (_SEMTwin, method_cls), namespace)


def sem_twins(methods: Mapping[str, type]) -> dict[str, type]:
    """``<name>_sem`` for every method of ``methods`` (the registry) SEM supports."""
    return {
        f"{name}_sem": make_sem_twin(name, cls)
        for name, cls in methods.items()
        if sem_refusal(name, cls) is None
    }


def sem_feature_extractor(
    checkpoint: str | Path | PretrainedCheckpoint,
    cfg: omegaconf.DictConfig | str | Path | None = None,
    tau: float | None = None,
) -> SEMFeatureExtractor:
    """A ``<name>_sem`` checkpoint's backbone + online embedder in eval mode, a probe backbone."""
    if not isinstance(checkpoint, PretrainedCheckpoint):
        checkpoint = PretrainedCheckpoint(checkpoint, cfg)
    if not issubclass(checkpoint.method_class(), _SEMTwin):
        raise ValueError(
            f"method '{checkpoint.method_name}' of this config is not a SEM twin (<name>_sem)"
        )
    model = checkpoint.method()
    probe_tau = model.hp.sem.probe_tau if tau is None else tau
    return SEMFeatureExtractor(model.backbone, model.sem_embedder, probe_tau).eval()
