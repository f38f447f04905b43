"""One data path per data format, chosen once by :func:`make_data_path`; all modules imported."""

from __future__ import annotations

import importlib
import pkgutil

from omegaconf import DictConfig, OmegaConf

from solo_diet.core.settings import KeyReader, parse_section, write_section
from solo_diet.launch.datapaths.base import REGISTRY, DataPath
from solo_diet.launch.settings import DATA_PATH_SECTIONS, FORMAT_KEY, DataSettings

_SHIPPED = ("image_folder", "gpu")
for _module in (*_SHIPPED, *sorted(m.name for m in pkgutil.iter_modules(__path__))):
    importlib.import_module(f"{__name__}.{_module}")


def parse_data_settings(cfg: DictConfig) -> DataSettings:
    """Fill and check ``data.format`` and the section its data path reads, written back whole."""
    data_format = KeyReader(cfg).choice(FORMAT_KEY, tuple(REGISTRY), default="image_folder")
    OmegaConf.update(cfg, FORMAT_KEY, data_format, force_add=True)
    section = REGISTRY[data_format].reads
    if section is None:
        return DataSettings(data_format)
    key, schema, owner = DATA_PATH_SECTIONS[section]
    parsed = parse_section(schema, cfg, key, owner, strict=section == "gpu")
    if hasattr(parsed, "checked"):
        parsed = parsed.checked(cfg)
    write_section(cfg, key, parsed)
    return DataSettings(data_format, **{section: parsed})


def make_data_path(settings: DataSettings) -> DataPath:
    """The data path serving the settings: its format's (``data.gpu.storage: stream``: streamed)."""
    from solo_diet.launch.datapaths.gpu import StreamPath  # imported above, in the shipped order

    streamed = settings.gpu is not None and settings.gpu.storage == "stream"
    return StreamPath(settings) if streamed else REGISTRY[settings.format](settings)
