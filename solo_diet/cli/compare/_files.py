"""Progress lines, the small JSON files of a comparison's run folders, and data signatures."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path


def progress(message: str) -> None:
    print(f"[compare] {message}", flush=True)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def write_json(path: Path, payload: dict) -> None:
    """Write through a temporary file, so an interrupted write never leaves half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)


@functools.lru_cache(maxsize=None)
def data_signature(path: str) -> str:
    """What the fingerprints know of a dataset path: a hash of its files' relative names and sizes
    (of the file itself for a file), so moving the data keeps a comparison's results and changing
    it redoes them. Cached per process; ``run_compare`` clears the cache when it starts."""
    if os.path.isfile(path):
        entries = [(os.path.basename(path), os.path.getsize(path))]
    elif os.path.isdir(path):
        prefix = len(os.path.join(path, ""))
        entries = []
        for folder, subfolders, files in os.walk(path):
            subfolders.sort()
            for name in sorted(files):
                full = os.path.join(folder, name)
                entries.append((full[prefix:], os.path.getsize(full)))
    else:
        return f"missing: {path}"
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]
