"""The evaluation of one checkpoint, identical for every run (probes, kNN, RankMe, LiDAR...)."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.compare.plan.jobs import Job, compose_linear
from solo_diet.compare.run.record import progress
from solo_diet.compare.spec.settings import EvaluationSettings, Spec
from solo_diet.compare.verdicts.aggregate import CODE_MEASURES, EMBEDDING_MEASURES
from solo_diet.core.metrics import clustering_report, kmeans, lidar, rankme, singular_values
from solo_diet.core.metrics.logreg import Convergence, logistic_regression_probe
from solo_diet.core.settings import core_errors_named
from solo_diet.launch.datapaths import make_data_path, parse_data_settings
from solo_diet.launch.datapaths.base import ViewRequest
from solo_diet.launch.settings import GPU_ARGUMENT_KEYS, parse_loader_settings
from solo_diet.methods.checkpoint import PretrainedCheckpoint
from solo_diet.methods.contract import method_contract

KMEANS_SCORES = {
    "nmi": "kmeans_nmi",
    "ami": "kmeans_ami",
    "ari": "kmeans_ari",
    "hungarian_acc": "kmeans_acc",
    "chance_nmi": "kmeans_chance_nmi",
}


class Evaluator:
    """Features and views shared by every run: eval-transformed train/val sets and LiDAR's views."""

    def __init__(self, settings: EvaluationSettings, probe_cfg: DictConfig):
        self.settings = settings
        use_cuda = (
            torch.cuda.is_available() and str(OmegaConf.select(probe_cfg, "accelerator")) != "cpu"
        )
        self.device = torch.device("cuda" if use_cuda else "cpu")
        probe_cfg = copy.deepcopy(probe_cfg)
        OmegaConf.set_struct(probe_cfg, False)
        if probe_cfg.get("seed") is None:  # unused: ordered batches, no augmentation
            probe_cfg.seed = self.settings.seed
        data = parse_data_settings(probe_cfg)  # the probe's settings, parsed once here
        data_path, probe_data = make_data_path(data), parse_loader_settings(probe_cfg, data)
        batch = self.settings.batch_size
        self.train_loader, self.val_loader = data_path.feature_loaders(probe_data, batch)
        views, node = self.settings.lidar_views, None  # None: the probe's training transform
        if self.settings.lidar_augmentations is not None:
            nodes = OmegaConf.load(self.settings.lidar_augmentations)
            node = nodes[0] if isinstance(nodes, ListConfig) else nodes
        request = ViewRequest(node, self._chosen, views, batch, self.settings.seed, self.device)
        self.lidar_views = data_path.lidar_views(probe_data, request)
        self.lidar_labels = torch.arange(len(self.lidar_views) // views).repeat_interleave(views)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of the eval-transformed images the probe sees."""
        with core_errors_named(GPU_ARGUMENT_KEYS):  # the loader places its set when first iterated
            images, _ = next(iter(self.val_loader))
        return tuple(images.shape[1:])

    def _chosen(self, count: int) -> torch.Tensor:
        """The seeded choice of LiDAR's val images (the same for every run and data path)."""
        generator = torch.Generator().manual_seed(self.settings.seed)
        return torch.randperm(count, generator=generator)[: self.settings.lidar_samples]

    @torch.no_grad()
    def _features(self, model: torch.nn.Module, loader) -> tuple[torch.Tensor, torch.Tensor]:
        feats, targets = [], []
        with core_errors_named(GPU_ARGUMENT_KEYS):  # the loader places its set when first iterated
            for images, labels in loader:
                feats.append(model(images.to(self.device)).float().flatten(1).cpu())
                targets.append(labels.cpu())
        return torch.cat(feats), torch.cat(targets)

    @torch.no_grad()
    def _view_features(self, model: torch.nn.Module) -> torch.Tensor:
        chunks = self.lidar_views.split(self.settings.batch_size)  # kept on the device for LiDAR
        return torch.cat([model(chunk.to(self.device)).float().flatten(1) for chunk in chunks])

    def code_scores(self, encoder: torch.nn.Module, prefix: str) -> dict[str, float]:
        """Clustering scores of the integer codes ``encoder(images)`` on the val split."""
        codes, val_y = self._features(encoder.to(self.device).eval(), self.val_loader)
        report = clustering_report(val_y, codes.long().flatten(), seed=self.settings.seed)
        return {f"{prefix}_{suffix}": report[key] for key, suffix in CODE_MEASURES.items()}

    def _knn(self, *split: torch.Tensor) -> float:
        """Top-1 of the weighted kNN: train-set bank, val queries (``split``: :meth:`_split`)."""
        from solo.utils.knn import WeightedKNNClassifier

        s = self.settings
        knn = WeightedKNNClassifier(k=s.knn_k, T=s.knn_temperature, distance_fx=s.knn_distance)
        names = ("train_features", "train_targets", "test_features", "test_targets")
        knn.update(**dict(zip(names, split)))
        return float(knn.compute()[0])

    def _logreg(self, *split: torch.Tensor) -> dict[str, Any]:
        """The converged logistic-regression probe's columns (docs/compare.md, "Evaluation")."""
        probe = logistic_regression_probe(*(t.to(self.device) for t in split))
        fit = [field.name for field in dataclasses.fields(Convergence)]
        return {
            "logreg_acc1": probe.acc1,
            "logreg_balanced_acc1": probe.balanced_acc1,
            "logreg_heldout_acc1": probe.held_out_acc1[probe.l2],
            "logreg_l2": probe.l2,
            "logreg_l2_edge": probe.edge,
            **{f"logreg_{key}": getattr(probe.convergence, key) for key in fit},
            "logreg_sweep": {
                "l2": list(probe.sweep),
                "heldout_acc1": list(probe.held_out_acc1.values()),
                **{key: [getattr(f, key) for f in probe.sweep.values()] for key in fit},
            },
        }

    def _split(self, model: torch.nn.Module) -> tuple[torch.Tensor, ...]:
        """Features and labels of the train and val sets: ``train_x, train_y, val_x, val_y``."""
        return (*self._features(model, self.train_loader), *self._features(model, self.val_loader))

    def curve_point(self, model: torch.nn.Module) -> dict[str, float]:
        """kNN top-1 and the logistic-regression probe of one representation (a curve point)."""
        split = self._split(model.to(self.device).eval())
        return {"knn_acc1": self._knn(*split), "logreg_acc1": self._logreg(*split)["logreg_acc1"]}

    def measure(
        self, model: torch.nn.Module, cluster: bool = False, logreg: bool = False
    ) -> dict[str, Any]:
        """kNN top-1, RankMe, LiDAR, the normalised singular values (+ k-means, logistic probe)."""
        model = model.to(self.device).eval()
        split = self._split(model)
        val_x, val_y = split[2:]
        rank_x = val_x[: self.settings.rankme_samples].to(self.device)  # RankMe's SVD there
        result: dict[str, Any] = {"knn_acc1": self._knn(*split)}
        if logreg:
            result.update(self._logreg(*split))
        if cluster:  # k-means (k = number of classes) of the L2-normalised features
            seed, normalized = self.settings.seed, F.normalize(val_x.double(), dim=1)
            clusters = kmeans(normalized, int(torch.unique(val_y).numel()), seed=seed).assignments
            report = clustering_report(val_y, clusters, seed=seed)
            result.update({column: report[key] for key, column in KMEANS_SCORES.items()})
        if val_x.shape[1] > self.settings.max_rank_dim:
            progress(
                f"  {val_x.shape[1]}-d features > evaluation.max_rank_dim: RankMe/LiDAR skipped"
            )
            return {**result, "rankme": math.nan, "lidar": math.nan, "spectrum": []}
        sigma = singular_values(rank_x)
        result.update(
            rankme=rankme(rank_x, sigma=sigma),  # one SVD for both
            lidar=lidar(
                self._view_features(model), self.lidar_labels, delta=self.settings.lidar_delta
            ),
            spectrum=(sigma / sigma[0]).tolist() if sigma[0] > 0 else [],
        )
        return result


@dataclasses.dataclass
class SharedEvaluator:
    """The :class:`Evaluator` of every checkpoint of a comparison, built at its first use."""

    evaluator: Optional[Evaluator] = None

    def get(self, spec: Spec, probe_cfg: DictConfig) -> Evaluator:
        if self.evaluator is None:
            progress("preparing evaluation data (eval-transformed train/val, LiDAR views)")
            self.evaluator = Evaluator(spec.evaluation, probe_cfg)
        return self.evaluator


def evaluate_checkpoint(
    spec: Spec, job: Job, checkpoint: Path, shared: SharedEvaluator
) -> dict[str, Any]:
    """Every metric of ``job``'s checkpoint, and of the representations a run's method adds."""
    from solo_diet.launch.linear import run_linear

    name, run_dir, pretrained = job.label, job.run_dir, PretrainedCheckpoint(checkpoint)
    probe_cfg = compose_linear(spec, checkpoint, run_dir)
    evaluator = shared.get(spec, probe_cfg)
    progress(f"{name}: offline linear probe")
    probe = run_linear(probe_cfg)
    result: dict[str, Any] = {"method": pretrained.method_name, "checkpoint": str(checkpoint)}
    result.update(
        linear_acc1=probe.get("val_acc1", math.nan), linear_loss=probe.get("val_loss", math.nan)
    )
    if "fitted_batch" in probe:  # a training set smaller than one probe batch: said in the report
        result["linear_fitted_batch"] = probe["fitted_batch"]
    clustering = spec.evaluation.clustering
    scores = "logistic regression, kNN, RankMe, LiDAR" + (", k-means" if clustering else "")
    progress(f"{name}: {scores} on backbone features")
    result.update(evaluator.measure(pretrained.backbone(), cluster=clustering, logreg=True))
    if job.reference is not None:
        return result
    contract = method_contract(pretrained.method_class())
    for extra in contract.extra_evaluations(pretrained, dataclasses.asdict(spec.evaluation)):
        if extra.kind == "codes":  # the columns `<extra.name>_*`
            if clustering:
                progress(f"{name}: clustering scores of the {extra.name}")
                result.update(evaluator.code_scores(extra.encoder, extra.name))
            continue
        if extra.probe_overrides:
            progress(f"{name}: linear probe on the {extra.name} representation")
            probe = run_linear(compose_linear(spec, checkpoint, run_dir, extra.probe_overrides))
            result[f"{extra.name}_linear_acc1"] = probe.get("val_acc1", math.nan)
        progress(f"{name}: kNN, RankMe, LiDAR on the {extra.name} representation")
        measured = evaluator.measure(extra.encoder)
        result.update({f"{extra.name}_{k}": measured[k] for k in EMBEDDING_MEASURES})
        result[f"{extra.name}_spectrum"] = measured["spectrum"]
    return result
