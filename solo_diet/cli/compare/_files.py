"""Progress lines and the small JSON files of a comparison's run folders."""

from __future__ import annotations

import json
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
