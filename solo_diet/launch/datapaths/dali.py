"""solo-learn's NVIDIA DALI datamodule for pretraining (``dali``); its probes read the image folder
through solo-learn's own loaders."""

from __future__ import annotations

from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError
from solo_diet.launch.datapaths.base import PretrainData
from solo_diet.launch.datapaths.image_folder import ImageFolderPath
from solo_diet.launch.settings import FORMAT_KEY, dali_installed


def _uses_erasing(cfg: DictConfig) -> bool:
    return any(
        float(OmegaConf.select(a, "random_erasing.prob", default=0.0)) > 0
        for a in cfg.augmentations
    )


class DaliPath(ImageFolderPath):
    """Pretraining through ``PretrainDALIDataModule`` with the config's augmentations."""

    formats = ("dali",)

    @property
    def solo_format(self) -> str:
        return "image_folder"  # solo-learn's classification loaders read the same folder

    def check(self, cfg: DictConfig, contract: Any) -> None:
        """Refuse set-ups that would hand an index-based method wrong dataset indices."""
        if not contract.uses_sample_indexes:
            return
        if not OmegaConf.select(cfg, "dali.encode_indexes_into_labels", default=False):
            raise ConfigError(
                f"method '{cfg.method}' uses dataset indices as labels, but with {FORMAT_KEY}=dali "
                "solo-learn returns dummy indices (arange(B)) unless "
                "`dali.encode_indexes_into_labels: True`. Set it."
            )

    def pretrain_data(self, cfg: DictConfig, contract: Any) -> PretrainData:
        if not dali_installed():
            raise ConfigError(
                f"`{FORMAT_KEY}: dali` needs NVIDIA DALI, which is not installed: use "
                f"{FORMAT_KEY}=gpu (batched augmentations on the GPU) or "
                f"{FORMAT_KEY}=image_folder."
            )
        from solo.data.dali_dataloader import (
            PretrainDALIDataModule,
            build_transform_pipeline_dali,
        )
        from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation
        from solo.utils.misc import compute_dataset_size

        if _uses_erasing(cfg):
            raise ConfigError(
                f"`augmentations[].random_erasing` is not available with {FORMAT_KEY}=dali."
            )
        transform = FullTransformPipeline(
            [
                NCropAugmentation(
                    build_transform_pipeline_dali(
                        cfg.data.dataset, aug, dali_device=cfg.dali.device
                    ),
                    aug.num_crops,
                )
                for aug in cfg.augmentations
            ]
        )
        datamodule = PretrainDALIDataModule(
            dataset=cfg.data.dataset,
            train_data_path=cfg.data.train_path,
            transforms=transform,
            num_large_crops=cfg.data.num_large_crops,
            num_small_crops=cfg.data.num_small_crops,
            num_workers=cfg.data.num_workers,
            batch_size=cfg.optimizer.batch_size,
            no_labels=cfg.data.no_labels,
            data_fraction=cfg.data.fraction,
            dali_device=cfg.dali.device,
            encode_indexes_into_labels=cfg.dali.encode_indexes_into_labels,
        )
        num_samples = compute_dataset_size(
            dataset=cfg.data.dataset,
            train=True,
            data_path=cfg.data.train_path,
            data_format="dali",
            no_labels=cfg.data.no_labels,
            data_fraction=cfg.data.fraction,
        )
        return PretrainData(datamodule, num_samples)

    def fit_kwargs(self, train: PretrainData, val_loader: Optional[Any]) -> dict[str, Any]:
        """The datamodule, its val loader the online probe's."""
        train.source.val_dataloader = lambda: val_loader
        return {"datamodule": train.source}
