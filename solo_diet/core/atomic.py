"""Files written whole or not at all (a temporary renamed over the target), and a checkpoint's
size check (:func:`check_archive_sizes`). Stdlib only: the command line refuses a zip bomb before
it imports torch, Lightning or solo-learn."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import zipfile
from pathlib import Path
from typing import IO, Iterator, Union

from solo_diet.core.errors import ConfigError

PathLike = Union[str, Path]
TEMPORARY = re.compile(r"\A\..+\.(\d+)\.[0-9a-f]{8}\.tmp\Z")  # .<name>.<pid>.<random>.tmp


def _temporary_beside(path: Path, binary: bool) -> tuple[Path, IO]:
    """A new temporary file in ``path``'s folder, open for writing."""
    while True:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        mode = "wb" if binary else "w"
        return temporary, os.fdopen(descriptor, mode, **({} if binary else {"newline": ""}))


@contextlib.contextmanager
def atomic_write(path: PathLike, binary: bool = False) -> Iterator[IO]:
    """Open ``path`` to write it whole: it lands only when the block ends without an exception."""
    path = Path(path)
    temporary, handle = _temporary_beside(path, binary)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename made durable, where a folder can be synced
        descriptor = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (:func:`atomic_write`)."""
    with atomic_write(path) as handle:
        handle.write(text)
    return Path(path)


def running(pid: int) -> bool:
    """Whether process ``pid`` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(folder: PathLike) -> list[Path]:
    """Delete the temporaries dead writers left under ``folder``; returns them."""
    stale = [
        path
        for path in Path(folder).rglob(".*.tmp")
        if (match := TEMPORARY.match(path.name)) and not running(int(match.group(1)))
    ]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


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
