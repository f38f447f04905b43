"""Reading a pretraining checkpoint without pickle (``allow_pickle`` opts in, with a warning), its
``args.json``, and the backbone or method they rebuild (:class:`PretrainedCheckpoint`)."""

from __future__ import annotations

import collections
import contextlib
import json
import pickle
import typing
import warnings
import zipfile
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Optional

import omegaconf
import torch
from omegaconf import base, dictconfig, listconfig, nodes
from torch import nn

from solo_diet.core.atomic import CorruptCheckpoint, PathLike, check_archive_sizes
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader
from solo_diet.methods.contract import register

CHECKPOINT_SUFFIXES = (".ckpt", ".pth", ".pt")
ALLOW_PICKLE_KEY = "allow_pickle_checkpoint"
# What a checkpoint may hold besides tensors without pickle: OmegaConf's containers and their parts
SAFE_GLOBALS = [
    *(dictconfig.DictConfig, listconfig.ListConfig, base.ContainerMetadata, base.Metadata),
    *(nodes.AnyNode, nodes.StringNode, nodes.IntegerNode, nodes.FloatNode, nodes.BooleanNode),
    *(typing.Any, collections.defaultdict, dict, list, int, float, str, bool),
]
# How to give the pretraining config without its args.json.
PASS_THE_CONFIG = (
    "give the pretraining's backbone yourself: `solo-diet linear ... ++backbone.name=<name> "
    "++pretrain_method=<method>` (and `++backbone.kwargs...` when it had some), or in Python "
    "`PretrainedCheckpoint(path, args=<its args.json or config>)`"
)


class UnsafeCheckpoint(ConfigError):
    """The checkpoint needs pickle to load, and nobody opted in; ``reason`` says which objects."""

    def __init__(self, path: PathLike, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"checkpoint {path} refused: {reason}.")


def pickle_allowed(cfg: omegaconf.DictConfig) -> bool:
    """The launchers' ``allow_pickle_checkpoint`` (default False)."""
    return KeyReader(cfg).bool(ALLOW_PICKLE_KEY, default=False)


def check_checkpoint_file(path: Path) -> None:
    """Refuse a checkpoint path that is not a file (a folder: name its newest ``.ckpt``)."""
    if path.is_file():
        return
    if path.is_dir():
        candidates = [c for depth in range(3) for c in path.glob("*/" * depth + "*.ckpt")]
        found = sorted((c for c in candidates if c.is_file()), key=lambda c: c.stat().st_mtime)
        where = f"; its newest .ckpt is {found[-1]}" if found else "; it holds no .ckpt file"
        raise ConfigError(f"checkpoint {path} is a folder, not a .ckpt file{where}.")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"checkpoint {path} does not exist, nor does its folder {folder}.")
    held = ", ".join(sorted(c.name for c in folder.glob("*.ckpt"))) or "no .ckpt file"
    raise ConfigError(f"checkpoint {path} does not exist; {folder} holds {held}.")


def read_pretrain_args(ckpt_path: PathLike) -> omegaconf.DictConfig:
    """The pretraining config saved as ``args.json`` next to the checkpoint."""
    ckpt_path = Path(ckpt_path)
    check_checkpoint_file(ckpt_path)
    args_path = ckpt_path.parent / "args.json"
    if not args_path.is_file():
        raise ConfigError(
            f"there is no args.json next to {ckpt_path}: it holds the pretraining config the model "
            f"is rebuilt from. Keep the checkpoint in its run folder, or {PASS_THE_CONFIG}."
        )
    try:
        args = _saved_args(args_path)
    except ValueError as err:
        raise ConfigError(
            f"{args_path}, the pretraining config of {ckpt_path}, does not read ({err}): restore "
            f"it (a rerun of the pretraining rewrites it), or {PASS_THE_CONFIG}."
        ) from None
    if args.get("method") is None:
        probed = args.get("pretrained_feature_extractor")
        raise ConfigError(
            f"{ckpt_path} is a linear probe's checkpoint, not a pretraining one: pass the one it "
            f"probed, {probed}."
            if probed
            else f"{args_path} names no `method`, so {ckpt_path} is no pretraining checkpoint: "
            f"pass one, or {PASS_THE_CONFIG}."
        )
    return args


def _registered_methods() -> dict[str, type]:
    from solo.methods import METHODS

    register()
    return METHODS


def _saved_args(args_path: Path) -> omegaconf.DictConfig:
    """An ``args.json``, its method's renamed ``method_kwargs`` moved to their new names."""
    args = omegaconf.OmegaConf.create(json.loads(args_path.read_text()))
    method = _registered_methods().get(str(args.get("method")))  # unknown: loading it says so
    kwargs = args.get("method_kwargs")
    for old, new in getattr(method, "renamed_method_kwargs", {}).items():
        if isinstance(kwargs, omegaconf.DictConfig) and old in kwargs:
            kwargs.setdefault(new, kwargs.pop(old))
    return args


def _not_loading(path: Path, error: BaseException) -> str:
    with path.open("rb") as f:
        head = f.read(2)
    if not head:
        return "the file is empty"
    what = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:80]}"
    if head in (b"PK", b"\x80\x02"):  # a zip checkpoint, or torch's legacy pickle format
        return f"it is cut short or damaged ({what}), as a kill or a full disk mid-save leaves it"
    return "it is not a torch checkpoint (neither the zip archive nor the pickle torch.save writes)"


def _needs_pickle(path: Path) -> Optional[str]:
    """Why a checkpoint only pickle loads is refused; None when its pickle does not parse."""
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - its pickle does not parse: a damaged file
        return None
    allowed = {f"{t.__module__}.{t.__qualname__}" for t in SAFE_GLOBALS}
    names = [n for n in found if n not in allowed]
    if not names:
        return None
    return (
        f"it holds objects only pickle can rebuild ({', '.join(names)}), and unpickling runs any "
        f"code the file carries; if you trust its source, `++{ALLOW_PICKLE_KEY}=True` (pretrain "
        "and linear) loads it"
    )


def _torch_load(path: Path, *, allow_pickle: bool, mmap: bool) -> dict:
    if archive := zipfile.is_zipfile(path):
        check_archive_sizes(path)
    mmap = mmap and archive  # legacy-format files cannot be memory-mapped
    try:
        # an explicit weights_only=True holds whatever TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD says
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=mmap)
    except Exception as error:  # noqa: BLE001 - what torch raises on a damaged file varies
        refused = isinstance(error, pickle.UnpicklingError) and archive and not allow_pickle
        unsafe = _needs_pickle(path) if refused else None
        if unsafe is not None:
            raise UnsafeCheckpoint(path, unsafe) from error
        raise CorruptCheckpoint(path, _not_loading(path, error)) from error


def checkpoint_problem(path: PathLike, *, allow_pickle: bool = False) -> Optional[str]:
    """Why the checkpoint at ``path`` does not load, or None (its tensors mapped, not read)."""
    if not Path(path).is_file():
        return "the file does not exist"
    try:
        _torch_load(Path(path), allow_pickle=False, mmap=True)
    except CorruptCheckpoint as err:
        return err.reason
    except UnsafeCheckpoint as err:
        return None if allow_pickle else err.reason
    return None


def load_checkpoint_file(path: PathLike, *, allow_pickle: bool = False) -> dict:
    """The checkpoint's dictionary on the CPU, loaded without pickle unless ``allow_pickle``."""
    path = Path(path)
    check_checkpoint_file(path)
    if allow_pickle:
        warnings.warn(
            f"loading {path} with pickle (`{ALLOW_PICKLE_KEY}=True`): unpickling runs any code the "
            "file carries; only do this for checkpoints whose source you trust.",
            stacklevel=2,
        )
    return _torch_load(path, allow_pickle=allow_pickle, mmap=False)


def _state_dict(checkpoint: dict, path: PathLike) -> dict:
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        held = sorted(map(str, checkpoint))[:8] if isinstance(checkpoint, dict) else None
        raise ConfigError(
            f"checkpoint {path} holds no `state_dict` (it holds {held or type(checkpoint).__name__}"
            "): pass a checkpoint of a solo-learn or solo-diet pretraining run."
        )
    return checkpoint["state_dict"]


def build_backbone(cfg: omegaconf.DictConfig) -> nn.Module:
    """The backbone as ``BaseMethod`` builds it (fc removed; CIFAR stem for CIFAR data)."""
    from solo.methods.base import BaseMethod

    backbone = BaseMethod._BACKBONES[cfg.backbone.name](cfg.pretrain_method, **cfg.backbone.kwargs)
    if cfg.backbone.name.startswith("resnet"):
        backbone.fc = nn.Identity()
        if cfg.data.dataset in ("cifar10", "cifar100"):
            backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
            backbone.maxpool = nn.Identity()
    return backbone


def _load_backbone_state(backbone: nn.Module, state: dict, ckpt_path: PathLike) -> int:
    weights = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    with _mismatch_named(ckpt_path, "the configured backbone (backbone.name/kwargs)"):
        missing, unexpected = backbone.load_state_dict(weights, strict=False)
    if missing or unexpected or not weights:
        raise ConfigError(
            f"checkpoint {ckpt_path} does not match the configured backbone (backbone.name/"
            f"kwargs): missing {list(missing)[:5]}, unexpected {list(unexpected)[:5]}. Use the "
            "pretraining run's backbone settings (its args.json)."
        )
    return len(weights)


@contextlib.contextmanager
def _mismatch_named(ckpt_path: PathLike, model: str) -> Iterator[None]:
    """A tensor of another shape than ``model``'s is one ConfigError naming the first."""
    try:
        yield
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines() if "size mismatch" in line]
        if not lines:
            raise
        raise ConfigError(
            f"checkpoint {ckpt_path} does not match {model}: {lines[0]} ({len(lines)} tensor(s) "
            "differ). Use the pretraining run's settings (its args.json, next to the checkpoint)."
        ) from None


def load_backbone_weights(
    backbone: nn.Module, ckpt_path: PathLike, *, allow_pickle: bool = False
) -> int:
    """Load every ``backbone.*`` tensor of a pretraining checkpoint; returns how many."""
    if not str(ckpt_path).endswith(CHECKPOINT_SUFFIXES):
        raise ConfigError(
            f"`pretrained_feature_extractor` must be a .ckpt/.pth/.pt file, got {str(ckpt_path)!r}."
        )
    state = _state_dict(load_checkpoint_file(ckpt_path, allow_pickle=allow_pickle), ckpt_path)
    return _load_backbone_state(backbone, state, ckpt_path)


class PretrainedCheckpoint:
    """The ``.ckpt`` ``path`` and ``args``, its config or args.json (default: beside it)."""

    def __init__(self, path: PathLike, args: Any = None, *, allow_pickle: bool = False):
        self.path, self.allow_pickle = Path(path), allow_pickle
        if args is None:
            args = read_pretrain_args(self.path)
        elif not isinstance(args, omegaconf.DictConfig):
            args = _saved_args(Path(args))
        self.args: omegaconf.DictConfig = args
        self._method: Optional[nn.Module] = None

    @property
    def method_name(self) -> str:
        return str(self.args.method)

    @cached_property
    def state_dict(self) -> dict:
        checkpoint = load_checkpoint_file(self.path, allow_pickle=self.allow_pickle)
        return _state_dict(checkpoint, self.path)

    def backbone(self) -> nn.Module:
        """The pretrained backbone (every backbone key loaded)."""
        cfg = omegaconf.OmegaConf.create({**self.args, "pretrain_method": self.method_name})
        backbone = build_backbone(cfg)
        _load_backbone_state(backbone, self.state_dict, self.path)
        return backbone

    def method_class(self) -> type:
        methods = _registered_methods()
        if self.method_name not in methods:
            raise ConfigError(
                f"checkpoint {self.path} was pretrained with method {self.method_name!r}, which is "
                f"not registered; registered methods: {sorted(methods)}."
            )
        return methods[self.method_name]

    def method(self) -> nn.Module:
        """The whole pretrained method, every key loaded strictly, in eval mode; built once."""
        if self._method is None:
            model = self.method_class()(self.args)
            with _mismatch_named(self.path, f"the {self.method_name} its args.json builds"):
                model.load_state_dict(self.state_dict, strict=True)
            self._method = model.eval()
        return self._method
