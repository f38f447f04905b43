"""solo-learn's DALI datamodule for pretraining; its probes read the image folder."""

from __future__ import annotations

from typing import Any, Optional

from omegaconf import OmegaConf

from solo_diet.core.errors import ConfigError
from solo_diet.launch.datapaths.base import BatchSamplerHook, PretrainData
from solo_diet.launch.datapaths.image_folder import ImageFolderPath
from solo_diet.launch.settings import FORMAT_KEY, DaliSettings, LoaderSettings, dali_installed


class DaliPath(ImageFolderPath):
    """Pretraining through ``PretrainDALIDataModule`` with the config's augmentations."""

    formats = ("dali",)
    reads = "dali"

    @property
    def dali(self) -> DaliSettings:
        """The run's ``dali`` settings (solo-learn's defaults for settings built by hand)."""
        return self.settings.dali or DaliSettings()

    def check(self, method: str, contract: Any) -> None:
        """Refuse set-ups that would hand an index-based method wrong dataset indices."""
        if not contract.uses_sample_indexes:
            return
        if not self.dali.encode_indexes_into_labels:
            raise ConfigError(
                f"method '{method}' uses dataset indices, which {FORMAT_KEY}=dali gives only with "
                "`dali.encode_indexes_into_labels: True` (else arange(B)): set it."
            )

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        """solo-learn's DALI datamodule (it orders the batches itself)."""
        if not dali_installed():
            raise ConfigError(
                f"`{FORMAT_KEY}: dali` needs NVIDIA DALI, which is not installed: use "
                f"{FORMAT_KEY}=gpu (augmentations on the GPU) or {FORMAT_KEY}=image_folder."
            )
        from solo.data.dali_dataloader import PretrainDALIDataModule, build_transform_pipeline_dali
        from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation
        from solo.utils.misc import compute_dataset_size

        if any(OmegaConf.select(a, "random_erasing.prob", default=0) for a in run.augmentations):
            raise ConfigError(
                f"`augmentations[].random_erasing` is not available with {FORMAT_KEY}=dali."
            )
        device, augmentations = self.dali.device, run.augmentations
        pipelines = [
            build_transform_pipeline_dali(run.dataset, a, dali_device=device) for a in augmentations
        ]
        crops = [NCropAugmentation(p, a.num_crops) for p, a in zip(pipelines, augmentations)]
        data = {"dataset": run.dataset, "no_labels": run.no_labels, "data_fraction": run.fraction}
        datamodule = PretrainDALIDataModule(
            **data,
            train_data_path=run.train_path,
            transforms=FullTransformPipeline(crops),
            num_large_crops=run.num_large_crops,
            num_small_crops=run.num_small_crops,
            num_workers=run.num_workers,
            batch_size=run.batch_size,
            dali_device=device,
            encode_indexes_into_labels=self.dali.encode_indexes_into_labels,
        )
        size = compute_dataset_size(
            **data, train=True, data_path=run.train_path, data_format="dali"
        )
        return PretrainData(datamodule, size)

    def fit_kwargs(self, train: PretrainData, val_loader: Optional[Any]) -> dict[str, Any]:
        """The datamodule, its val loader the online probe's."""
        train.source.val_dataloader = lambda: val_loader
        return {"datamodule": train.source}
