"""A disk cache of decoded image folders (docs/data-path.md, ``data.gpu.decode_cache``)."""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from solo_diet.core.atomic import atomic_write

CACHE_ENV = "SOLO_DIET_CACHE"
ENTRY_VERSION = 1  # bump when the decoding itself changes
_WRITES: dict[Path, threading.Thread] = {}  # the entries this process is storing


def cache_root() -> Path:
    """``$SOLO_DIET_CACHE``, else ``$XDG_CACHE_HOME/solo-diet/decoded`` (``~/.cache`` unset)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "solo-diet" / "decoded"


def cached_decode(
    samples: Sequence[tuple[str, int]], image_size: Optional[int], decode: Callable[[], Tensor]
) -> Tensor:
    """The images of ``samples``: the cache's entry keyed by their paths, targets, sizes, mtimes and
    the settings, else ``decode()``, stored by a thread while the run goes on."""
    digest = hashlib.sha256(f"v{ENTRY_VERSION} image_size={image_size}\n".encode())
    for file, target in samples:
        stat = os.stat(file)
        digest.update(f"{file}\0{target}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    path = cache_root() / f"{digest.hexdigest()[:32]}.pt"
    if path in _WRITES:  # this process is still storing the entry
        _WRITES.pop(path).join()
    try:
        return torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):
        pass  # no entry, or one left unreadable by a killed process: decode again
    images = decode()
    # written beside the run (a slow disk took 3.4 s for 25 MB on a lent GPU host); the thread is
    # not a daemon, so the process waits for it at its end
    _WRITES[path] = threading.Thread(target=_store, args=(path, images), name="decode-cache")
    _WRITES[path].start()
    return images


def _store(path: Path, images: Tensor) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, binary=True) as file:
            torch.save(images, file)
    except OSError as err:
        print(f"[solo-diet] decode cache not written ({err}); set {CACHE_ENV} to a writable folder")
