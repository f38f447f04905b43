"""A checkpoint file's checks that need no torch (stdlib only), so the command line refuses a
zip bomb before it imports torch, Lightning or solo-learn: :func:`check_archive_sizes`."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Union

from solo_diet.core.errors import ConfigError

PathLike = Union[str, Path]


class CorruptCheckpoint(ConfigError):
    """The checkpoint file does not load (empty, cut short, not torch's); ``reason`` says which."""

    def __init__(self, path: PathLike, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(
            f"checkpoint {path} does not load: {reason}. Pass a complete checkpoint (another of "
            "its run folder, or rerun the pretraining that wrote it: a rerun resumes from its "
            "newest checkpoint that loads)."
        )


def check_archive_sizes(path: PathLike) -> None:
    """Refuse a zip checkpoint declaring more bytes than the file holds (damage, or a bomb);
    anything else passes (a file that is no zip, or a zip that does not open: torch names it)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(entry.file_size for entry in archive.infolist())
    except (zipfile.BadZipFile, OSError):
        return
    if declared > (size := path.stat().st_size):
        raise CorruptCheckpoint(
            path,
            f"it is corrupt or hostile: its zip entries unpack to {declared:,} bytes, more than "
            f"the {size:,} bytes of the file (torch stores them uncompressed)",
        )
