"""Progress lines and the small JSON files of a comparison's run folders (written whole or not at
all: :mod:`solo_diet._atomic`)."""

from __future__ import annotations

import json
from pathlib import Path

from solo_diet._atomic import write_text_atomic


def progress(message: str) -> None:
    print(f"[compare] {message}", flush=True)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def write_json(path: Path, payload: dict) -> None:
    """Write whole or not at all (a unique temporary file renamed over it), so neither an
    interrupted write nor two writers leave half a file."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str))
