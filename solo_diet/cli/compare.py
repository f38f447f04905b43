"""``solo-diet compare``: several methods, one dataset, one budget, identical evaluation, one report.

Each run of the spec is pretrained with ``run_pretrain`` (a finished run is not repeated, an
interrupted one resumes from its last epoch checkpoint), then every checkpoint is evaluated the
same way: offline linear probe (``run_linear``: solo-learn's LinearModel), weighted kNN
(``solo.utils.knn.WeightedKNNClassifier``), RankMe and LiDAR (``solo_diet.metrics``, spec Sec. 6.5)
on the backbone features and, for ``<name>_sem`` runs, on the SEM representation too (with a second
linear probe, ``probe: sem``); k-means clustering scores of the L2-normalised val features and, for
code-logit methods (``cplearn*``), of the argmax codes (``solo_diet.metrics.kmeans`` /
``clustering_report``); pretraining cost comes from ``solo_diet.callbacks.EpochCostLogger``. Output: ``report.md``, ``results.csv``,
PNG plots and one folder per run. The spec format is in README.md, section 'Side-by-side comparisons'.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from solo_diet.config import ConfigError
from solo_diet.metrics import clustering_report, kmeans, lidar, rankme, singular_values

SPEC_DEFAULTS: dict[str, Any] = {
    "name": "comparison",
    "output_dir": None,
    "config_path": None,
    "data": {"root": None, "dataset": "custom", "train_path": None, "val_path": None},
    "budget": {"max_epochs": None, "batch_size": None, "limit_train_batches": None},
    "trainer": [],
    "pretrain_overrides": [],
    "linear": {"config_path": None, "config_name": None, "overrides": []},
    "evaluation": {
        "batch_size": 256,
        "knn_k": 20,
        "knn_temperature": 0.07,
        "knn_distance": "cosine",
        "rankme_samples": 25600,
        "lidar_samples": 1000,
        "lidar_views": 10,
        "lidar_augmentations": None,
        "lidar_delta": 1e-4,
        "max_rank_dim": 4096,
        "sem_tau": None,
        "rankme_every_n_epochs": 0,
        "clustering": True,
        "seed": 0,
    },
    "runs": [],
}
RUN_KEYS = ("name", "config_name", "config_path", "overrides")
PATH_KEYS = ("output_dir", "config_path", "data.root", "data.train_path", "data.val_path", "linear.config_path",
             "evaluation.lidar_augmentations")
BUDGET_TARGETS = {"max_epochs": "max_epochs", "batch_size": "optimizer.batch_size", "limit_train_batches": "limit_train_batches"}
SPEC_OWNED = ("data.dataset", "data.train_path", "data.val_path", "checkpoint.dir", "checkpoint.enabled",
              "checkpoint.frequency", "auto_resume.enabled", "wandb.enabled", "name", "max_steps")
RESULT_COLUMNS = ("run", "method", "epochs", "linear_acc1", "linear_loss", "knn_acc1", "rankme", "lidar",
                  "kmeans_nmi", "kmeans_ami", "kmeans_ari", "kmeans_acc", "kmeans_chance_nmi",
                  "codes_nmi", "codes_ami", "codes_used", "sem_linear_acc1", "sem_knn_acc1", "sem_rankme",
                  "sem_lidar", "pretrain_wall_s", "train_s", "samples_per_s", "peak_gpu_mib", "checkpoint")
KMEANS_SCORES = {"nmi": "kmeans_nmi", "ami": "kmeans_ami", "ari": "kmeans_ari", "hungarian_acc": "kmeans_acc",
                 "chance_nmi": "kmeans_chance_nmi"}
CODE_SCORES = {"nmi": "codes_nmi", "ami": "codes_ami", "codes_used": "codes_used"}
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Run:
    """One entry of ``runs``: a pretraining config plus overrides."""

    name: str
    config_path: Path
    config_name: str
    overrides: list[str]


def _progress(message: str) -> None:
    print(f"[compare] {message}", flush=True)


def _resolve_paths(spec: DictConfig, base: Path) -> None:
    for key in PATH_KEYS:
        value = OmegaConf.select(spec, key)
        if value is not None and not Path(str(value)).expanduser().is_absolute():
            OmegaConf.update(spec, key, str((base / str(value)).resolve()))
    for run in spec.get("runs") or []:
        if isinstance(run, DictConfig) and run.get("config_path") is not None:
            run.config_path = str((base / str(run.config_path)).expanduser().resolve())


def load_spec(spec_path: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """Read and check a spec; paths in the file are relative to its folder, paths in ``overrides``
    (OmegaConf dot-list, e.g. ``budget.max_epochs=2``) to the current directory."""
    spec_path = Path(spec_path).expanduser().resolve()
    if not spec_path.is_file():
        raise ConfigError(f"comparison spec {spec_path} does not exist.")
    schema = OmegaConf.create(SPEC_DEFAULTS)
    OmegaConf.set_struct(schema, True)
    try:
        from_file = OmegaConf.load(spec_path)
        _resolve_paths(from_file, spec_path.parent)
        from_cli = OmegaConf.from_dotlist(list(overrides))
        _resolve_paths(from_cli, Path.cwd())
        spec = OmegaConf.merge(schema, from_file, from_cli)
    except (ConfigKeyError, ValidationError) as err:
        raise ConfigError(f"{spec_path}: {err.msg.splitlines()[0]}. Spec keys: {sorted(SPEC_DEFAULTS)}.") from err
    OmegaConf.set_struct(spec, False)
    _check_spec(spec, spec_path)
    return spec


def _check_spec(spec: DictConfig, spec_path: Path) -> None:
    if spec.output_dir is None:
        raise ConfigError(f"{spec_path}: set `output_dir` (where runs, checkpoints and the report go).")
    for key in ("max_epochs", "batch_size"):
        value = spec.budget[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{spec_path}: `budget.{key}` must be a positive integer (one budget for every run), got {value}.")
    limit = spec.budget.limit_train_batches
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise ConfigError(f"`budget.limit_train_batches` must be a positive batch count or fraction, got {limit}.")
    if spec.linear.config_path is None or spec.linear.config_name is None:
        raise ConfigError(f"{spec_path}: set `linear.config_path` and `linear.config_name` (the offline probe's YAML).")
    if not isinstance(spec.runs, ListConfig) or len(spec.runs) == 0:
        raise ConfigError(f"{spec_path}: `runs` must be a non-empty list of {{name, config_name, overrides}}.")
    if spec.data.root is not None:
        spec.data.train_path = spec.data.train_path or str(Path(spec.data.root) / "train")
        spec.data.val_path = spec.data.val_path or str(Path(spec.data.root) / "val")
    if spec.data.dataset == "custom":
        for split in ("train_path", "val_path"):
            folder = spec.data[split]
            if folder is None or not Path(folder).is_dir():
                raise ConfigError(
                    f"dataset missing: `data.{split}` = {folder} is not a folder. Write one with e.g. "
                    "`solo-diet data animal-mnist <dir>` and pass `data.root=<dir>` (train/ and val/ inside)."
                )
    evaluation = spec.evaluation
    if evaluation.lidar_views < 2 or evaluation.lidar_samples < 2:
        raise ConfigError("`evaluation.lidar_samples` and `evaluation.lidar_views` must both be >= 2.")
    if evaluation.lidar_augmentations is not None and not Path(evaluation.lidar_augmentations).is_file():
        raise ConfigError(f"`evaluation.lidar_augmentations` {evaluation.lidar_augmentations} is not a file.")


def parse_runs(spec: DictConfig) -> list[Run]:
    """The spec's runs, with clear errors for missing keys, duplicates and overrides of budget keys."""
    runs: list[Run] = []
    for position, entry in enumerate(spec.runs):
        if not isinstance(entry, DictConfig) or "name" not in entry or "config_name" not in entry:
            raise ConfigError(f"runs[{position}] must be a mapping with at least `name` and `config_name`.")
        unknown = sorted(set(entry) - set(RUN_KEYS))
        if unknown:
            raise ConfigError(f"runs[{position}] ({entry.name}): unknown keys {unknown}; allowed {list(RUN_KEYS)}.")
        name = str(entry.name)
        if not SAFE_NAME.match(name) or name in {r.name for r in runs}:
            raise ConfigError(f"run name {name!r} must be unique and made of letters, digits, '_', '.', '-'.")
        config_path = entry.get("config_path") or spec.config_path
        if config_path is None:
            raise ConfigError(f"run {name!r}: no `config_path` (set it on the run or at the top of the spec).")
        overrides = [str(o) for o in entry.get("overrides") or []]
        check_overrides(f"run {name!r}", overrides, spec.budget)
        runs.append(Run(name, Path(config_path), str(entry.config_name), overrides))
    check_overrides("`trainer`", [str(o) for o in spec.trainer], spec.budget)
    check_overrides("`pretrain_overrides`", [str(o) for o in spec.pretrain_overrides], spec.budget)
    return runs


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def check_overrides(owner: str, overrides: Sequence[str], budget: DictConfig) -> None:
    """Refuse overrides of keys the spec sets for every run (budget, data, checkpointing)."""
    for override in overrides:
        key = _override_key(override)
        for budget_key, target in BUDGET_TARGETS.items():
            if key == target:
                raise ConfigError(
                    f"conflicting budgets: {owner} sets `{override}` but the spec's `budget.{budget_key}` "
                    f"({budget[budget_key]}) applies to every run. Remove the override or change the budget."
                )
        if key in SPEC_OWNED:
            raise ConfigError(f"{owner} overrides `{key}`, which the comparison sets for every run; remove `{override}`.")


def _quoted(key: str, value: Any) -> str:
    return f"++{key}='{value}'" if isinstance(value, (str, Path)) else f"++{key}={value}"


def _data_overrides(spec: DictConfig) -> list[str]:
    return [_quoted(f"data.{key}", spec.data[key]) for key in ("dataset", "train_path", "val_path") if spec.data[key]]


def _fingerprint(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _compose(owner: str, config_path: str | Path, config_name: str, overrides: Sequence[str]) -> DictConfig:
    """``compose_cfg`` with missing files and bad overrides reported as ConfigError naming ``owner``."""
    from hydra.errors import HydraException

    from solo_diet.cli.common import compose_cfg

    try:
        return compose_cfg(str(config_path), config_name, overrides)
    except (FileNotFoundError, HydraException) as err:
        raise ConfigError(f"{owner}: {str(err).splitlines()[0]}") from err


def compose_run(spec: DictConfig, run: Run, run_dir: Path) -> DictConfig:
    """The run's pretraining cfg: its YAML + trainer + run overrides, then the spec's budget, data
    and checkpointing (which nothing else may set)."""
    from solo.methods import METHODS

    budget = [_quoted(target, spec.budget[key]) for key, target in BUDGET_TARGETS.items() if spec.budget[key] is not None]
    forced = [
        _quoted("name", run.name),
        _quoted("checkpoint.dir", run_dir / "pretrain"),
        "++checkpoint.enabled=True",
        "++checkpoint.frequency=1",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
    ]
    shared = [str(o) for o in spec.trainer] + [str(o) for o in spec.pretrain_overrides]
    overrides = shared + run.overrides + budget + _data_overrides(spec) + forced
    cfg = _compose(f"run {run.name!r}", run.config_path, run.config_name, overrides)
    if cfg.get("method") not in METHODS:
        raise ConfigError(
            f"run {run.name!r}: unknown method {cfg.get('method')!r}; registered methods: {sorted(METHODS)}."
        )
    if OmegaConf.select(cfg, "max_steps") not in (None, -1):
        raise ConfigError(f"conflicting budgets: run {run.name!r} sets max_steps={cfg.max_steps}; the budget is epochs.")
    if spec.budget.limit_train_batches is None and OmegaConf.select(cfg, "limit_train_batches") not in (None, 1.0):
        raise ConfigError(
            f"conflicting budgets: {run.config_name}.yaml of run {run.name!r} sets limit_train_batches="
            f"{cfg.limit_train_batches}; set `budget.limit_train_batches` for every run instead."
        )
    return cfg


def _checkpoint_epoch(path: Path) -> int:
    match = re.search(r"-ep=(\d+)\.ckpt$", path.name)
    return int(match.group(1)) if match else -1


def latest_checkpoint(folder: Path) -> Optional[Path]:
    """The checkpoint of the highest epoch under ``folder`` (newest file on ties)."""
    checkpoints = list(folder.glob("**/*.ckpt"))
    if not checkpoints:
        return None
    return max(checkpoints, key=lambda p: (_checkpoint_epoch(p), p.stat().st_mtime))


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)


def pretrain(spec: DictConfig, run: Run, cfg: DictConfig, run_dir: Path) -> tuple[Path, bool]:
    """Pretrain once: ``(last checkpoint, trained now)``. A finished run is reused, an interrupted one
    resumes from its latest checkpoint; a run folder made by another config is refused."""
    from solo_diet.callbacks import EpochCostLogger, RankMeMonitor
    from solo_diet.cli.pretrain import run_pretrain

    state_path = run_dir / "state.json"
    state = _read_json(state_path)
    fingerprint = _fingerprint(OmegaConf.to_container(cfg, resolve=True))
    if state and state["pretrain_fingerprint"] != fingerprint:
        raise ConfigError(
            f"{run_dir} holds run {run.name!r} pretrained with another config or budget; use another "
            "`output_dir` or delete that folder."
        )
    if state.get("checkpoint") and Path(state["checkpoint"]).is_file():
        return Path(state["checkpoint"]), False
    state = {"pretrain_fingerprint": fingerprint, "pretrain_wall_s": state.get("pretrain_wall_s", 0.0)}
    _write_json(state_path, state)
    resume = latest_checkpoint(run_dir / "pretrain")
    last_epoch = cfg.max_epochs - 1
    if resume is not None and _checkpoint_epoch(resume) >= last_epoch:
        checkpoint = resume
    else:
        if resume is not None:
            _progress(f"run {run.name!r}: resuming after epoch {_checkpoint_epoch(resume)} from {resume}")
            cfg.resume_from_checkpoint = str(resume)
        callbacks: list = [EpochCostLogger(run_dir / "epochs.csv")]
        if spec.evaluation.rankme_every_n_epochs > 0:
            callbacks.append(RankMeMonitor(spec.evaluation.rankme_every_n_epochs, spec.evaluation.rankme_samples))
        start = time.time()
        last = run_pretrain(cfg, extra_callbacks=callbacks)
        state["pretrain_wall_s"] += time.time() - start
        if last is None:
            raise RuntimeError(f"run {run.name!r}: pretraining wrote no checkpoint.")
        checkpoint = Path(last)
    state["checkpoint"] = str(checkpoint)
    _write_json(state_path, state)
    return checkpoint, True


def compose_linear(spec: DictConfig, checkpoint: Path, run_dir: Path, probe: Sequence[str] = ()) -> DictConfig:
    """The offline probe cfg, identical for every run but for the checkpoint (and ``probe``: the
    representation overrides of the SEM probe)."""
    forced = [*probe,
        _quoted("pretrained_feature_extractor", checkpoint),
        _quoted("checkpoint.dir", run_dir / "linear"),
        "++checkpoint.enabled=False",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
    ]
    overrides = [str(o) for o in spec.trainer] + [str(o) for o in spec.linear.overrides] + _data_overrides(spec) + forced
    return _compose("`linear`", spec.linear.config_path, spec.linear.config_name, overrides)


class Evaluator:
    """Features and views shared by every run: eval-transformed train/val sets and LiDAR's views."""

    def __init__(self, spec: DictConfig, probe_cfg: DictConfig):
        from torch.utils.data import DataLoader

        self.settings = spec.evaluation
        use_cuda = torch.cuda.is_available() and str(OmegaConf.select(probe_cfg, "accelerator")) != "cpu"
        self.device = torch.device("cuda" if use_cuda else "cpu")
        train_set, val_set = self._datasets(probe_cfg, eval_transform=True)
        workers = int(OmegaConf.select(probe_cfg, "data.num_workers", default=0))
        self.train_loader, self.val_loader = (
            DataLoader(s, batch_size=self.settings.batch_size, shuffle=False, num_workers=workers) for s in (train_set, val_set)
        )
        self.lidar_views, self.lidar_labels = self._lidar_views(probe_cfg)

    @staticmethod
    def _probe_transforms(probe_cfg: DictConfig):
        """The linear probe's (train, val) transforms."""
        from solo_diet.cli.common import classification_transforms

        return classification_transforms(probe_cfg.data.dataset, probe_cfg.data.augmentations)

    def _datasets(self, probe_cfg: DictConfig, eval_transform: bool):
        from solo.data.classification_dataloader import prepare_datasets

        transform = self._probe_transforms(probe_cfg)[1] if eval_transform else None
        return prepare_datasets(
            probe_cfg.data.dataset, transform, transform,
            train_data_path=probe_cfg.data.train_path, val_data_path=probe_cfg.data.val_path,
        )

    def _lidar_views(self, probe_cfg: DictConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """``lidar_views`` augmented views of ``lidar_samples`` val images (seeded: identical for every run)."""
        from solo_diet.cli.pretrain import build_pretrain_transform

        seed = int(self.settings.seed)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        if self.settings.lidar_augmentations is not None:
            nodes = OmegaConf.load(self.settings.lidar_augmentations)
            transform = build_pretrain_transform(probe_cfg.data.dataset, nodes[0] if isinstance(nodes, ListConfig) else nodes)
        else:
            transform = self._probe_transforms(probe_cfg)[0]
        _, raw_val = self._datasets(probe_cfg, eval_transform=False)
        count = min(int(self.settings.lidar_samples), len(raw_val))
        chosen = torch.randperm(len(raw_val))[:count].tolist()
        views = [transform(raw_val[i][0]) for i in chosen for _ in range(self.settings.lidar_views)]
        labels = torch.arange(count).repeat_interleave(self.settings.lidar_views)
        return torch.stack(views), labels

    @torch.no_grad()
    def _features(self, model: torch.nn.Module, loader) -> tuple[torch.Tensor, torch.Tensor]:
        feats, targets = [], []
        for images, labels in loader:
            feats.append(model(images.to(self.device)).float().flatten(1).cpu())
            targets.append(labels)
        return torch.cat(feats), torch.cat(targets)

    @torch.no_grad()
    def _view_features(self, model: torch.nn.Module) -> torch.Tensor:
        chunks = self.lidar_views.split(int(self.settings.batch_size))
        return torch.cat([model(chunk.to(self.device)).float().flatten(1).cpu() for chunk in chunks])

    def cluster_scores(self, val_x: torch.Tensor, val_y: torch.Tensor) -> dict[str, float]:
        """k-means (k = number of classes) of the L2-normalised features, scored against the labels."""
        clusters = kmeans(
            torch.nn.functional.normalize(val_x.double(), dim=1), int(torch.unique(val_y).numel()), seed=int(self.settings.seed)
        ).assignments
        report = clustering_report(val_y, clusters, seed=int(self.settings.seed))
        return {column: report[key] for key, column in KMEANS_SCORES.items()}

    def code_scores(self, method_model: torch.nn.Module) -> dict[str, float]:
        """Clustering scores of the argmax codes ``forward(x)["z"].argmax()`` on the val split."""
        codes, val_y = self._features(_ArgmaxCodes(method_model).to(self.device).eval(), self.val_loader)
        report = clustering_report(val_y, codes.long().flatten(), seed=int(self.settings.seed))
        return {column: report[key] for key, column in CODE_SCORES.items()}

    def measure(self, model: torch.nn.Module, cluster: bool = False) -> dict[str, Any]:
        """kNN top-1, RankMe, LiDAR and the normalised singular values of one representation
        (+ the k-means scores when ``cluster``)."""
        from solo.utils.knn import WeightedKNNClassifier

        model = model.to(self.device).eval()
        train_x, train_y = self._features(model, self.train_loader)
        val_x, val_y = self._features(model, self.val_loader)
        knn = WeightedKNNClassifier(
            k=self.settings.knn_k, T=self.settings.knn_temperature, distance_fx=self.settings.knn_distance
        )
        knn.update(train_features=train_x, train_targets=train_y, test_features=val_x, test_targets=val_y)
        knn_acc1, _ = knn.compute()
        rank_x = val_x[: int(self.settings.rankme_samples)]
        result: dict[str, Any] = {"knn_acc1": float(knn_acc1)}
        if cluster:
            result.update(self.cluster_scores(val_x, val_y))
        if val_x.shape[1] > self.settings.max_rank_dim:
            _progress(f"  {val_x.shape[1]}-d features > evaluation.max_rank_dim: RankMe/LiDAR skipped")
            return {**result, "rankme": math.nan, "lidar": math.nan, "spectrum": []}
        sigma = singular_values(rank_x)
        result.update(
            rankme=rankme(rank_x),
            lidar=lidar(self._view_features(model), self.lidar_labels, delta=self.settings.lidar_delta),
            spectrum=(sigma / sigma[0]).tolist() if sigma[0] > 0 else [],
        )
        return result


class _ArgmaxCodes(torch.nn.Module):
    """The argmax code id (one column) of a method whose forward returns code logits ``z``."""

    def __init__(self, method_model: torch.nn.Module):
        super().__init__()
        self.method_model = method_model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.method_model(images)["z"].argmax(1, keepdim=True)


def _backbone(checkpoint: Path) -> torch.nn.Module:
    from solo_diet.cli.linear import build_backbone, load_backbone_weights

    args = json.loads((checkpoint.parent / "args.json").read_text())
    cfg = OmegaConf.create({"backbone": args["backbone"], "pretrain_method": args["method"], "data": args["data"]})
    backbone = build_backbone(cfg)
    load_backbone_weights(backbone, str(checkpoint))
    return backbone


def pretrain_costs(run_dir: Path) -> dict[str, float]:
    """Totals of the run's ``epochs.csv``: epochs, train seconds, samples/s and peak GPU MiB."""
    from solo_diet.callbacks import read_epoch_rows

    path = run_dir / "epochs.csv"
    rows = read_epoch_rows(path) if path.is_file() else []
    train_s = sum(r["train_seconds"] for r in rows)
    peaks = [r["peak_gpu_mib"] for r in rows if not math.isnan(r["peak_gpu_mib"])]
    return {
        "epochs": len(rows),
        "train_s": train_s,
        "samples_per_s": sum(r["samples"] for r in rows) / train_s if train_s > 0 else math.nan,
        "peak_gpu_mib": max(peaks) if peaks else math.nan,
    }


def evaluate(spec: DictConfig, run: Run, method: str, checkpoint: Path, run_dir: Path, evaluator_cache: dict) -> dict:
    """Every metric of one checkpoint (``result.json`` of the run folder)."""
    from solo_diet.cli.linear import run_linear

    probe_cfg = compose_linear(spec, checkpoint, run_dir)
    if "evaluator" not in evaluator_cache:
        _progress("preparing evaluation data (eval-transformed train/val, LiDAR views)")
        evaluator_cache["evaluator"] = Evaluator(spec, probe_cfg)
    evaluator: Evaluator = evaluator_cache["evaluator"]
    _progress(f"run {run.name!r}: offline linear probe")
    probe = run_linear(probe_cfg)
    result: dict[str, Any] = {"run": run.name, "method": method, "checkpoint": str(checkpoint)}
    result.update(linear_acc1=probe.get("val_acc1", math.nan), linear_loss=probe.get("val_loss", math.nan))
    clustering = bool(spec.evaluation.clustering)
    _progress(f"run {run.name!r}: kNN, RankMe, LiDAR" + (", k-means" if clustering else "") + " on backbone features")
    backbone = evaluator.measure(_backbone(checkpoint), cluster=clustering)
    result.update({k: v for k, v in backbone.items() if k != "spectrum"}, spectrum=backbone["spectrum"])
    if clustering and method.startswith("cplearn"):
        _progress(f"run {run.name!r}: clustering scores of the argmax codes")
        from solo_diet.methods.registry import load_pretrained_method

        result.update(evaluator.code_scores(load_pretrained_method(checkpoint, checkpoint.parent / "args.json")))
    if method.endswith("_sem"):
        from solo_diet.methods.sem import sem_feature_extractor

        _progress(f"run {run.name!r}: linear probe on the SEM representation")
        tau = spec.evaluation.sem_tau
        sem_probe = run_linear(
            compose_linear(spec, checkpoint, run_dir, ["++probe=sem"] + ([] if tau is None else [f"++sem_tau={tau}"]))
        )
        result["sem_linear_acc1"] = sem_probe.get("val_acc1", math.nan)
        _progress(f"run {run.name!r}: kNN, RankMe, LiDAR on the SEM representation")
        sem = evaluator.measure(sem_feature_extractor(checkpoint, checkpoint.parent / "args.json", spec.evaluation.sem_tau))
        result.update({f"sem_{k}": sem[k] for k in ("knn_acc1", "rankme", "lidar")}, sem_spectrum=sem["spectrum"])
    result.update(pretrain_costs(run_dir), pretrain_wall_s=_read_json(run_dir / "state.json").get("pretrain_wall_s"))
    return result


def run_compare(spec_path: str | Path, overrides: Sequence[str] = ()) -> Path:
    """Run (or finish) a comparison; returns the path of report.md."""
    import solo_diet

    solo_diet.register()
    spec = load_spec(spec_path, overrides)
    runs = parse_runs(spec)
    out = Path(spec.output_dir)
    cfgs = {run.name: compose_run(spec, run, out / "runs" / run.name) for run in runs}
    compose_linear(spec, out / "checkpoint-placeholder.ckpt", out)  # a bad probe config fails before training
    _progress(f"{spec.name}: {len(runs)} runs, {spec.budget.max_epochs} epochs at batch {spec.budget.batch_size} -> {out}")
    eval_fingerprint = _fingerprint(OmegaConf.to_container(spec.evaluation) | {"linear": OmegaConf.to_container(spec.linear)})
    evaluator_cache: dict = {}
    results = []
    for position, run in enumerate(runs, 1):
        run_dir = out / "runs" / run.name
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = cfgs[run.name]
        _progress(f"({position}/{len(runs)}) run {run.name!r}: method {cfg.method}")
        checkpoint, trained = pretrain(spec, run, cfg, run_dir)
        if not trained:
            _progress(f"run {run.name!r}: pretraining already finished ({checkpoint.name})")
        result_path = run_dir / "result.json"
        previous = _read_json(result_path)
        if not trained and previous.get("fingerprint") == eval_fingerprint and previous.get("checkpoint") == str(checkpoint):
            _progress(f"run {run.name!r}: already evaluated")
            results.append(previous)
            continue
        result = evaluate(spec, run, cfg.method, checkpoint, run_dir, evaluator_cache) | {"fingerprint": eval_fingerprint}
        _write_json(result_path, result)
        results.append(result)
        _progress(
            f"run {run.name!r}: linear {result['linear_acc1']:.2f}%  kNN {result['knn_acc1']:.2f}%  "
            f"RankMe {result['rankme']:.1f}  LiDAR {result['lidar']:.1f}"
            + (f"  k-means NMI {result['kmeans_nmi']:.3f}" if "kmeans_nmi" in result else "")
        )
    report = write_report(spec, results, out)
    _progress(f"report: {report}")
    return report


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def write_results_csv(results: list[dict], path: Path) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(RESULT_COLUMNS), extrasaction="ignore", restval="")
        writer.writeheader()
        writer.writerows(results)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_spectra(results: list[dict], path: Path) -> Path:
    """Singular values of each representation (val split), divided by the largest, log scale."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        for key, label in (("spectrum", result["run"]), ("sem_spectrum", f"{result['run']} (SEM)")):
            if result.get(key):
                axis.semilogy(range(1, len(result[key]) + 1), result[key], label=label)
    axis.set(xlabel="index k", ylabel="sigma_k / sigma_1", title="singular-value spectra (val features)")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_curves(results: list[dict], out: Path, path: Path) -> Path:
    """Per-epoch pretraining curves of every run (``epochs.csv``): train loss, online probe, RankMe."""
    from solo_diet.callbacks import read_epoch_rows

    panels = (("train_loss", "train loss"), ("val_acc1", "online probe val top-1 (%)"),
              ("val_loss", "online probe val loss"), ("val_rankme", "RankMe (val, backbone)"))
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for result in results:
        csv_path = out / "runs" / result["run"] / "epochs.csv"
        rows = read_epoch_rows(csv_path) if csv_path.is_file() else []
        for axis, (column, _) in zip(axes, panels):
            points = [(r["epoch"], r[column]) for r in rows if column in r and not math.isnan(r[column])]
            if points:
                axis.plot(*zip(*points), marker=".", label=result["run"])
    for axis, (_, title) in zip(axes, panels):
        axis.set(xlabel="epoch", title=title)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def write_report(spec: DictConfig, results: list[dict], out: Path) -> Path:
    """results.csv, spectra.png, curves.png and report.md (a table and the settings)."""
    write_results_csv(results, out / "results.csv")
    plot_spectra(results, out / "spectra.png")
    plot_curves(results, out, out / "curves.png")
    columns = [c for c in RESULT_COLUMNS if c != "checkpoint" and any(_cell(r.get(c, math.nan)) != "–" for r in results)]
    lines = [
        f"# Comparison: {spec.name}",
        "",
        f"Data: `{spec.data.dataset}` train `{spec.data.train_path}`, val `{spec.data.val_path}`. "
        f"Budget (every run): {spec.budget.max_epochs} epochs, batch {spec.budget.batch_size}"
        + (f", limit_train_batches {spec.budget.limit_train_batches}" if spec.budget.limit_train_batches else "")
        + f". Trainer overrides: {list(spec.trainer)}.",
        "",
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
    ]
    lines += ["| " + " | ".join(_cell(r.get(c, math.nan)) for c in columns) + " |" for r in results]
    settings = spec.evaluation
    lines += [
        "",
        f"- `linear_acc1`/`linear_loss`: solo-learn LinearModel on the frozen backbone, val split "
        f"(`{spec.linear.config_name}` + {list(spec.linear.overrides)}).",
        f"- `knn_acc1`: WeightedKNNClassifier (k={settings.knn_k}, T={settings.knn_temperature}, "
        f"{settings.knn_distance}), train bank -> val, eval transform.",
        f"- `rankme`: RankMe of the first {settings.rankme_samples} val features (uncentred). "
        f"`lidar`: LiDAR on {settings.lidar_samples} val images x {settings.lidar_views} augmented views "
        f"(delta={settings.lidar_delta}). `sem_*`: the same on the SEM representation of `_sem` runs "
        "(`sem_linear_acc1`: the same probe with `probe: sem`).",
        "- `kmeans_*`: k-means++ / Lloyd (k = number of classes, 5 seeded starts) of the L2-normalised val "
        "features: NMI, AMI, ARI, Hungarian accuracy and permutation-chance NMI. `codes_*`: NMI, AMI and "
        "number of used codes of the argmax code of `cplearn*` runs on the val split.",
        "- `pretrain_wall_s`: wall time of the pretraining calls (startup included); `train_s`, "
        "`samples_per_s`, `peak_gpu_mib`: summed / max over epochs of the training loops (EpochCostLogger).",
        "",
        "![singular-value spectra](spectra.png)",
        "",
        "![pretraining curves](curves.png)",
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
