"""A comparison spec (a YAML file or a mapping, docs/compare.md) as a typed :class:`Spec`."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, ValidationError

from solo_diet.compare.spec import settings
from solo_diet.compare.spec.settings import Claim, DataSettings, Spec
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import FORMAT_KEY, KeyReader, closest_name, is_number, parse_section
from solo_diet.launch.errors import check_destination, class_folders, same_class_folders

SpecSource = Union[str, Path, Mapping[str, Any]]  # a YAML file, or the spec itself
SPEC_DEFAULTS: dict[str, Any] = {  # the typed sections' defaults are their schemas' (SECTIONS)
    "name": "comparison",
    "output_dir": None,
    "config_path": None,
    "data": dict(root=None, dataset="custom", train_path=None, val_path=None, format="auto"),
    "budget": None,
    "seeds": None,
    "reference_rows": list(settings.REFERENCE_ROWS),
    "only": None,
    "parallel": None,
    "trainer": [],
    "pretrain_overrides": [],
    "linear": {"config_path": None, "config_name": None, "overrides": []},
    "evaluation": None,
    "runs": [],
    "claims": [],
    "curves": None,
} | {section: dataclasses.asdict(schema()) for section, schema in settings.SECTIONS.items()}
LAUNCH_DATA_FORMATS = ("auto", "gpu", "image_folder")  # what `demo` and `compare` choose from
PROBE_CLASSES = 5  # solo-learn's LinearModel reports top-5 accuracy
PATH_KEYS = (
    *("output_dir", "config_path", "data.root", "data.train_path", "data.val_path"),
    *("linear.config_path", "evaluation.lidar_augmentations"),
)
LIST_KEYS = sorted(k for k, v in SPEC_DEFAULTS.items() if isinstance(v, list))
_LISTS_SET_WHOLE = (
    f"These spec keys are lists, set whole: {LIST_KEYS}, e.g. "
    "'trainer=[accelerator=cpu,precision=32]'."
)


def resolve_launch_format(requested: str, on_gpu: bool, key: str) -> str:
    """A ``demo``/``compare`` format choice; ``auto``: ``gpu`` on a GPU, else ``image_folder``."""
    if requested not in LAUNCH_DATA_FORMATS:
        raise ConfigError(f"{key} must be one of {list(LAUNCH_DATA_FORMATS)}, got {requested!r}.")
    if requested == "auto":
        return "gpu" if on_gpu else "image_folder"
    return requested


def _resolve_paths(node: DictConfig, base: Path) -> None:
    for key in PATH_KEYS:
        value = OmegaConf.select(node, key)
        if value is not None and not Path(str(value)).expanduser().is_absolute():
            OmegaConf.update(node, key, str((base / str(value)).resolve()))
    for run in node.get("runs") or []:
        if isinstance(run, DictConfig) and run.get("config_path") is not None:
            run.config_path = str((base / str(run.config_path)).expanduser().resolve())


def _unknown_key_message(where: str | Path, error: ConfigKeyError | ValidationError) -> str:
    full_key = str(getattr(error, "full_key", "") or "")
    section, _, key = full_key.rpartition(".")
    node = OmegaConf.select(OmegaConf.create(SPEC_DEFAULTS), section) if section else None
    if not full_key or (section and not isinstance(node, DictConfig)):
        return f"{where}: {error.msg.splitlines()[0]}."
    valid = sorted(node) if isinstance(node, DictConfig) else sorted(SPEC_DEFAULTS)
    close = closest_name(key, valid)
    hint = f"; did you mean `{section + '.' if section else ''}{close}`?" if close else "."
    if section:
        return f"{where}: `{full_key}` is not a key of `{section}`{hint} `{section}` keys: {valid}."
    return f"{where}: `{full_key}` is not a spec key{hint} Spec keys: {valid}."


def load_spec(spec: SpecSource, overrides: Sequence[str] = ()) -> Spec:
    """A YAML file or a mapping (left as it was), plus dot-list ``overrides``, as one checked
    :class:`Spec`; paths are relative to the file's folder, else to the current directory."""
    for override in overrides:  # `trainer.accelerator=cpu` would index the `trainer` list
        key = override.partition("=")[0]
        head, dot, _ = key.partition(".")
        if dot and head in LIST_KEYS:
            raise ConfigError(f"`{key}` sets an item of `{head}`, a list. {_LISTS_SET_WHOLE}")
    where, base = "the spec", Path.cwd()
    if isinstance(spec, (str, Path)):
        where = Path(spec).expanduser().absolute()  # as typed: a symlink stays one
        if not where.is_file():
            raise ConfigError(f"comparison spec {where} does not exist.")
        base = where.resolve().parent
    elif not isinstance(spec, Mapping):
        raise ConfigError(
            f"a comparison spec is a YAML file's path or a mapping, got {type(spec).__name__}."
        )
    schema = OmegaConf.create(SPEC_DEFAULTS)
    OmegaConf.set_struct(schema, True)
    try:
        if isinstance(where, Path):
            given = OmegaConf.load(where)
            if not isinstance(given, DictConfig):
                raise ConfigError(
                    f"{where}: a spec is a YAML mapping of spec keys "
                    f"({', '.join(sorted(SPEC_DEFAULTS))}), got a "
                    f"{type(given).__name__.removesuffix('Config').lower()}."
                )
        else:  # copied: the caller's mapping is not changed
            plain = OmegaConf.to_container(spec) if isinstance(spec, DictConfig) else dict(spec)
            given = OmegaConf.create(plain)
        _resolve_paths(given, base)
        from_cli = OmegaConf.from_dotlist(list(overrides))
        _resolve_paths(from_cli, Path.cwd())
        merged = OmegaConf.merge(schema, given, from_cli)
    except (ConfigKeyError, ValidationError) as err:
        raise ConfigError(_unknown_key_message(where, err)) from err
    except ConfigTypeError as err:  # a dict where the spec has a list
        raise ConfigError(f"{where}: {err.msg.splitlines()[0]}. {_LISTS_SET_WHOLE}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}): "
            "save the spec as UTF-8."
        ) from None
    OmegaConf.set_struct(merged, False)
    return _checked(merged, where)


def _check_folder_data(data: DictConfig, output_dir: str) -> None:
    """``custom`` data: both splits exist, differ, hold the same classes, and not ``output_dir``."""
    for split in ("train_path", "val_path"):
        if data[split] is None or not Path(data[split]).is_dir():
            raise ConfigError(
                f"dataset missing: `data.{split}` = {data[split]} is not a folder. Write one "
                "with e.g. `solo-diet data animal-mnist <dir>` and pass `data.root=<dir>` "
                "(train/ and val/ inside)."
            )
    if Path(data.train_path).resolve() == Path(data.val_path).resolve():
        raise ConfigError(
            f"`data.val_path` must be another folder than `data.train_path`, got "
            f"{data.val_path} for both: the probes would be scored on their own training "
            "images; pass the held-out split."
        )
    out = Path(output_dir).resolve()
    for split in ("train_path", "val_path"):
        if out == Path(data[split]).resolve() or Path(data[split]).resolve() in out.parents:
            raise ConfigError(
                f"`output_dir` must be outside `data.{split}`, got {output_dir} in "
                f"{data[split]}: its folders would be read as a class of images; pass another "
                "output_dir."
            )
    classes = len(class_folders(data.train_path))
    if classes < PROBE_CLASSES:
        raise ConfigError(
            f"`data.train_path` = {data.train_path} holds {classes} class(es); the linear "
            f"probe (solo-learn's LinearModel, top-5 accuracy) needs at least {PROBE_CLASSES}: "
            "give it one subfolder per class."
        )
    same_class_folders(data.train_path, data.val_path)


def _checked(spec: DictConfig, where: str | Path) -> Spec:
    if spec.output_dir is None:
        raise ConfigError(f"{where}: set `output_dir` (where runs, checkpoints and the report go).")
    check_destination(spec.output_dir, f"{where}: `output_dir`")
    sections = {  # each key checked by its field; unknown keys were refused by the merge
        section: parse_section(schema, spec, section, f"`{section}`", strict=False)
        for section, schema in settings.SECTIONS.items()
    }
    limit = sections["budget"].limit_train_batches
    if limit is not None and limit <= 0:
        raise ConfigError(
            f"`budget.limit_train_batches` must be a positive batch count or fraction, got {limit}."
        )
    linear = spec.linear
    if linear.config_path is None or linear.config_name is None:
        raise ConfigError(
            f"{where}: set `linear.config_path` and `linear.config_name` (the offline probe's "
            "YAML)."
        )
    if not isinstance(spec.runs, ListConfig) or len(spec.runs) == 0:
        raise ConfigError(
            f"{where}: `runs` must be a non-empty list of {{name, config_name, overrides}}."
        )
    data = spec.data
    if data.root is not None:
        data.train_path = data.train_path or str(Path(data.root) / "train")
        data.val_path = data.val_path or str(Path(data.root) / "val")
    if data.dataset == "custom":
        _check_folder_data(data, spec.output_dir)
    seeds = settings.check_seeds(spec.seeds, spec.reference_rows, where)
    names = [str(run.get("name")) for run in spec.runs] + list(spec.reference_rows)
    only = settings.check_only(spec.only, names, where)
    import torch  # here, not at the top: the spec loads before the comparison's heavy imports

    on_gpu = torch.cuda.is_available()  # `auto`: the GPU data path on a GPU, kept in the record
    data.format = resolve_launch_format(data.format, on_gpu, f"{where}: `{FORMAT_KEY}`")
    views = sections["evaluation"].lidar_augmentations
    if views is not None and not Path(views).is_file():
        raise ConfigError(f"`evaluation.lidar_augmentations` {views} is not a file.")
    runs = settings.parse_runs(spec.runs, spec, sections["budget"], seeds is not None)
    return Spec(
        name=str(spec.name),
        output_dir=Path(spec.output_dir),
        data=DataSettings(**{f.name: data[f.name] for f in dataclasses.fields(DataSettings)}),
        seeds=seeds,
        reference_rows=tuple(spec.reference_rows),
        only=only,
        trainer=tuple(str(o) for o in spec.trainer),
        pretrain_overrides=tuple(str(o) for o in spec.pretrain_overrides),
        linear=settings.LinearSettings(
            str(linear.config_path), str(linear.config_name), tuple(map(str, linear.overrides))
        ),
        runs=runs,
        claims=parse_claims(spec.claims, [r.name for r in runs], spec.budget.max_epochs, where),
        resolved=OmegaConf.to_yaml(spec),
        **sections,
    )


CLAIM_KEYS = tuple(field.name for field in dataclasses.fields(Claim))


def parse_claims(
    claims: Any, names: Sequence[str], max_epochs: int, where: str | Path
) -> tuple[Claim, ...]:
    """The ``claims`` node, typed and checked against the run ``names`` and ``max_epochs``."""
    if not isinstance(claims, ListConfig):
        raise ConfigError(f"{where}: `claims` must be a list ([] for none), got {claims}.")
    parsed, root = [], OmegaConf.create({"claims": claims})  # for the keys' full names
    for i, claim in enumerate(claims):
        try:
            parsed.append(_claim(root, claim, f"claims[{i}]", names, max_epochs))
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    return tuple(parsed)


def _claim(root: DictConfig, claim: Any, key: str, names: Sequence[str], max_epochs: int) -> Claim:
    at, key_of = f"`{key}`", f"`{key}."
    if not isinstance(claim, DictConfig) or not set(claim) <= set(CLAIM_KEYS):
        raise ConfigError(f"{at} must be a mapping with keys from {list(CLAIM_KEYS)}.")
    if not isinstance(claim.get("text"), str) or not isinstance(claim.get("metric"), str):
        raise ConfigError(f"{at} needs `text` (the paper's words) and `metric` (a column).")
    for side in ("better", "than"):
        runs = claim.get(side)
        if runs is not None and (
            not isinstance(runs, ListConfig) or not runs or not set(runs) <= set(names)
        ):
            raise ConfigError(
                f"{key_of}{side}` must be a non-empty list of {list(names)}, got {runs}."
            )
    than, at_least, epoch = claim.get("than"), claim.get("at_least"), claim.get("epoch")
    if claim.get("better") is None or (than is None) == (at_least is None):
        raise ConfigError(f"{at} needs `better` and exactly one of `than` or `at_least`.")
    both = [run for run in claim.better if run in (than or ())]
    if both and claim.get("than_metric") in (None, claim.metric):
        raise ConfigError(
            f"{key_of}than` must not name a `better` run, got {both} in both: a run against "
            "itself on one column never resolves; remove it from one side (or read another "
            "column of it with `than_metric`)."
        )
    if at_least is not None and not (is_number(at_least) and math.isfinite(at_least)):
        raise ConfigError(f"{key_of}at_least` must be a finite number, got {at_least}.")
    than_metric = claim.get("than_metric")
    if than_metric is not None and (not isinstance(than_metric, str) or than is None or epoch):
        raise ConfigError(
            f"{key_of}than_metric` is a result column read for the `than` runs (a claim "
            f"with `than` and without `epoch`), got {than_metric}."
        )
    if epoch is not None and not (type(epoch) is int and 1 <= epoch <= max_epochs):  # not True
        raise ConfigError(f"{key_of}epoch` must be an epoch count in 1..{max_epochs}, got {epoch}.")
    budget = parse_section(settings.PaperBudget, root, f"{key}.paper_budget", "`paper_budget`")
    if budget.steps and budget.samples:
        raise ConfigError(
            f"{key_of}paper_budget.samples` and `steps` both given: name one (the count the "
            "source states), the other follows from its batch size."
        )
    if budget.than_epochs and than is None:
        raise ConfigError(
            f"{key_of}paper_budget.than_epochs` is the budget of the `than` runs; this claim has "
            "none (remove it, or compare with `than`)."
        )
    if not isinstance(claim.get("definition"), str) or not claim.definition.strip():
        raise ConfigError(
            f"{key_of}definition` must be the source's own reading of the claim (its words, with "
            f"figure or table), or ours with `ours: true`; got {claim.get('definition')}."
        )
    given = {k: claim.get(k) for k in ("text", "metric", "than_metric", "at_least", "definition")}
    runs = {k: tuple(claim.get(k) or ()) for k in ("better", "than")}
    ours = KeyReader(claim, key).bool("ours", default=False)
    return Claim(**given, **runs, epoch=epoch, paper_budget=budget, ours=ours)
