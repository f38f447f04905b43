"""The comparison spec: defaults, loading, checks, and its translation into Hydra overrides.

A spec is a YAML file (format: ``docs/compare.md``). Every section has defaults; a key that is not
one of them is refused with the valid keys of the section where it occurs.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, ValidationError

from solo_diet.compare.claims import parse_claims
from solo_diet.compare.spec_checks import (
    REFERENCE_ROWS,
    SECTIONS,
    BudgetSettings,
    DataSettings,
    LinearSettings,
    Spec,
    check_only,
    check_seeds,
    parse_runs,
    parse_sections,
)
from solo_diet.config import ConfigError, closest_name
from solo_diet.launch.errors import check_destination
from solo_diet.launch.settings import FORMAT_KEY, resolve_launch_format

# a spec: its YAML file, or the spec itself (a dict or DictConfig)
SpecSource = Union[str, Path, Mapping[str, Any]]
SPEC_DEFAULTS: dict[str, Any] = {  # the typed sections' defaults are their schemas' (SECTIONS)
    "name": "comparison",
    "output_dir": None,
    "config_path": None,
    "data": dict(root=None, dataset="custom", train_path=None, val_path=None, format="auto"),
    "budget": None,
    "seeds": None,
    "reference_rows": list(REFERENCE_ROWS),
    "only": None,
    "parallel": None,
    "trainer": [],
    "pretrain_overrides": [],
    "linear": {"config_path": None, "config_name": None, "overrides": []},
    "evaluation": None,
    "runs": [],
    "claims": [],
    "curves": None,
} | {section: dataclasses.asdict(schema()) for section, schema in SECTIONS.items()}
PROBE_CLASSES = 5  # solo-learn's LinearModel reports top-5 accuracy
# reference rows that a seed changes (the untrained backbone's initialisation): one per seed
SEEDED_REFERENCES = ("random_init",)
PATH_KEYS = (
    *("output_dir", "config_path", "data.root", "data.train_path", "data.val_path"),
    *("linear.config_path", "evaluation.lidar_augmentations"),
)


def _resolve_paths(spec: DictConfig, base: Path) -> None:
    for key in PATH_KEYS:
        value = OmegaConf.select(spec, key)
        if value is not None and not Path(str(value)).expanduser().is_absolute():
            OmegaConf.update(spec, key, str((base / str(value)).resolve()))
    for run in spec.get("runs") or []:
        if isinstance(run, DictConfig) and run.get("config_path") is not None:
            run.config_path = str((base / str(run.config_path)).expanduser().resolve())


def _unknown_key_message(spec_path: str | Path, error: ConfigKeyError | ValidationError) -> str:
    """One line naming the unknown key, its closest valid key and the valid keys of its section
    (OmegaConf's own "not in struct" text left out)."""
    full_key = str(getattr(error, "full_key", "") or "")
    section, _, key = full_key.rpartition(".")
    node = OmegaConf.select(OmegaConf.create(SPEC_DEFAULTS), section) if section else None
    if not full_key or (section and not isinstance(node, DictConfig)):
        return f"{spec_path}: {error.msg.splitlines()[0]}."
    valid = sorted(node) if isinstance(node, DictConfig) else sorted(SPEC_DEFAULTS)
    where = f"a key of `{section}`" if section else "a spec key"
    close = closest_name(key, valid)
    hint = f"; did you mean `{section + '.' if section else ''}{close}`?" if close else "."
    keys = f"`{section}` keys" if section else "Spec keys"
    return f"{spec_path}: `{full_key}` is not {where}{hint} {keys}: {valid}."


LIST_KEYS = sorted(k for k, v in SPEC_DEFAULTS.items() if isinstance(v, list))
_LISTS_SET_WHOLE = (
    f"These spec keys are lists, set whole: {LIST_KEYS}, e.g. "
    "'trainer=[accelerator=cpu,precision=32]'."
)


def _check_no_list_items(overrides: Sequence[str]) -> None:
    """Refuse ``trainer.accelerator=cpu``: the dot-list would index the ``trainer`` list."""
    for override in overrides:
        key = override.partition("=")[0]
        head, dot, _ = key.partition(".")
        if dot and head in LIST_KEYS:
            raise ConfigError(f"`{key}` sets an item of `{head}`, a list. {_LISTS_SET_WHOLE}")


def load_spec(spec: SpecSource, overrides: Sequence[str] = ()) -> Spec:
    """Read and check a spec, a YAML file or the spec itself (a dict or DictConfig, left as it
    was), into one typed :class:`Spec`; paths in a file are relative to its folder, paths in a
    mapping and in ``overrides`` (OmegaConf dot-list, e.g. ``budget.max_epochs=2``) to the current
    directory."""
    where, base = _spec_origin(spec)
    _check_no_list_items(overrides)
    schema = OmegaConf.create(SPEC_DEFAULTS)
    OmegaConf.set_struct(schema, True)
    try:
        given = _read_spec_file(where) if isinstance(where, Path) else _copied(spec)
        _resolve_paths(given, base)
        from_cli = OmegaConf.from_dotlist(list(overrides))
        _resolve_paths(from_cli, Path.cwd())
        merged = OmegaConf.merge(schema, given, from_cli)
    except (ConfigKeyError, ValidationError) as err:
        raise ConfigError(_unknown_key_message(where, err)) from err
    except ConfigTypeError as err:  # a dict where the spec has a list
        raise ConfigError(f"{where}: {err.msg.splitlines()[0]}. {_LISTS_SET_WHOLE}") from err
    OmegaConf.set_struct(merged, False)
    return _checked(merged, where)


def _spec_origin(spec: SpecSource) -> tuple[str | Path, Path]:
    """What error messages call the spec (its file, as typed: a symlink stays one), and the folder
    its relative paths start from."""
    if isinstance(spec, (str, Path)):
        spec_path = Path(spec).expanduser().absolute()
        if not spec_path.is_file():
            raise ConfigError(f"comparison spec {spec_path} does not exist.")
        return spec_path, spec_path.resolve().parent
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"a comparison spec is a YAML file's path or a mapping, got {type(spec).__name__}."
        )
    return "the spec", Path.cwd()


def _read_spec_file(path: Path) -> DictConfig:
    """The spec file's YAML: a mapping of spec keys, in UTF-8."""
    try:
        given = OmegaConf.load(path)
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}): "
            "save the spec as UTF-8."
        ) from None
    if not isinstance(given, DictConfig):
        raise ConfigError(
            f"{path}: a spec is a YAML mapping of spec keys ({', '.join(sorted(SPEC_DEFAULTS))}), "
            f"got a {type(given).__name__.removesuffix('Config').lower()}."
        )
    return given


def _copied(spec: Mapping[str, Any]) -> DictConfig:
    """A spec given as a mapping, copied (the caller's is not changed)."""
    plain = OmegaConf.to_container(spec) if isinstance(spec, DictConfig) else dict(spec)
    return OmegaConf.create(plain)


def _checked(spec: DictConfig, spec_path: str | Path) -> Spec:
    """The merged spec, checked, as a :class:`Spec`."""
    if spec.output_dir is None:
        raise ConfigError(
            f"{spec_path}: set `output_dir` (where runs, checkpoints and the report go)."
        )
    check_destination(spec.output_dir, f"{spec_path}: `output_dir`")
    sections = parse_sections(spec)
    if spec.linear.config_path is None or spec.linear.config_name is None:
        raise ConfigError(
            f"{spec_path}: set `linear.config_path` and `linear.config_name` (the offline probe's "
            "YAML)."
        )
    if not isinstance(spec.runs, ListConfig) or len(spec.runs) == 0:
        raise ConfigError(
            f"{spec_path}: `runs` must be a non-empty list of {{name, config_name, overrides}}."
        )
    if spec.data.root is not None:
        spec.data.train_path = spec.data.train_path or str(Path(spec.data.root) / "train")
        spec.data.val_path = spec.data.val_path or str(Path(spec.data.root) / "val")
    if spec.data.dataset == "custom":
        for split in ("train_path", "val_path"):
            folder = spec.data[split]
            if folder is None or not Path(folder).is_dir():
                raise ConfigError(
                    f"dataset missing: `data.{split}` = {folder} is not a folder. Write one with "
                    "e.g. `solo-diet data animal-mnist <dir>` and pass `data.root=<dir>` (train/ "
                    "and val/ inside)."
                )
        classes = sum(entry.is_dir() for entry in Path(spec.data.train_path).iterdir())
        if classes < PROBE_CLASSES:
            raise ConfigError(
                f"`data.train_path` = {spec.data.train_path} holds {classes} class(es); the linear "
                f"probe (solo-learn's LinearModel, top-5 accuracy) needs at least {PROBE_CLASSES}: "
                "give it one subfolder per class."
            )
    check_seeds(spec, spec_path)
    check_only(spec, spec_path)
    # compare's format choice (``auto``: the GPU data path on a GPU), kept in its record too
    key = f"{spec_path}: `{FORMAT_KEY}`"
    spec.data.format = resolve_launch_format(spec.data.format, torch.cuda.is_available(), key)
    views = sections["evaluation"].lidar_augmentations
    if views is not None and not Path(views).is_file():
        raise ConfigError(f"`evaluation.lidar_augmentations` {views} is not a file.")
    data = {field.name: spec.data[field.name] for field in dataclasses.fields(DataSettings)}
    linear = spec.linear
    return Spec(
        name=str(spec.name),
        output_dir=Path(spec.output_dir),
        data=DataSettings(**data),
        seeds=tuple(spec.seeds) if spec.seeds is not None else None,
        reference_rows=tuple(spec.reference_rows),
        only=tuple(spec.only) if spec.only is not None else None,
        trainer=tuple(str(o) for o in spec.trainer),
        pretrain_overrides=tuple(str(o) for o in spec.pretrain_overrides),
        linear=LinearSettings(
            str(linear.config_path), str(linear.config_name), tuple(map(str, linear.overrides))
        ),
        runs=parse_runs(spec, sections["budget"]),
        claims=parse_claims(spec, spec_path),
        resolved=OmegaConf.to_yaml(spec),
        **sections,
    )


def checkpoint_interval(budget: BudgetSettings, epochs: int) -> int:
    """Epochs between pretraining checkpoints of a run that trains ``epochs`` (the last epoch is
    always saved): the budget's ``checkpoint_every_n_epochs``, or a tenth of ``epochs``."""
    return budget.checkpoint_every_n_epochs or math.ceil(epochs / 10)


def validation_interval(budget: BudgetSettings, epochs: int) -> int:
    """Lightning's ``check_val_every_n_epoch`` for a pretraining of ``epochs``: the budget's
    ``val_every_n_epochs``, or the largest divisor of ``epochs`` not above ``epochs / 50`` (at
    least 50 points on the online-probe curves, the last epoch among them)."""
    if budget.val_every_n_epochs:
        return budget.val_every_n_epochs
    target = max(1, epochs // 50)
    return max(d for d in range(1, target + 1) if epochs % d == 0)


def quoted(key: str, value: Any) -> str:
    """A forced Hydra override ``++key=value`` (strings and paths quoted)."""
    return f"++{key}='{value}'" if isinstance(value, (str, Path)) else f"++{key}={value}"


def data_overrides(data: DataSettings) -> list[str]:
    """The spec's data set, forced on every pretraining and probe config."""
    keys = ("dataset", "train_path", "val_path", "format")
    return [quoted(f"data.{key}", getattr(data, key)) for key in keys if getattr(data, key)]


def compose(
    owner: str, config_path: str | Path, config_name: str, overrides: Sequence[str]
) -> DictConfig:
    """``compose_cfg``; missing files and bad overrides raise a ConfigError naming ``owner``."""
    from hydra.errors import HydraException

    from solo_diet.launch.common import compose_cfg

    try:
        return compose_cfg(str(config_path), config_name, overrides)
    except (FileNotFoundError, HydraException, ConfigError) as err:
        raise ConfigError(f"{owner}: {str(err).splitlines()[0]}") from err
