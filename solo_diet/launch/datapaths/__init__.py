"""One data path per data format, chosen once by :func:`make_data_path` from the run's
:class:`~solo_diet.launch.settings.DataSettings`, behind :class:`DataPath`'s interface.

Every module of this package is imported here, so a new format is one new module defining a
:class:`DataPath` subclass with its ``formats`` (the settings then accept them); the three
shipped modules come first, which keeps the formats' listed order."""

from __future__ import annotations

import importlib
import pkgutil

from omegaconf import DictConfig

from solo_diet.launch.datapaths.base import REGISTRY, DataPath, PretrainData
from solo_diet.launch.settings import DataSettings, parse_data_settings

_SHIPPED = ("image_folder", "dali", "gpu")
for _module in (*_SHIPPED, *sorted(m.name for m in pkgutil.iter_modules(__path__))):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["DataPath", "PretrainData", "data_formats", "make_data_path", "data_path_for"]


def data_formats() -> tuple[str, ...]:
    """Every data format a data path serves."""
    return tuple(REGISTRY)


def make_data_path(settings: DataSettings) -> DataPath:
    """The data path serving the settings' data format."""
    return REGISTRY[settings.format](settings)


def data_path_for(cfg: DictConfig) -> DataPath:
    """Parse ``cfg``'s data settings (filling their defaults in it) and choose its data path."""
    return make_data_path(parse_data_settings(cfg))
