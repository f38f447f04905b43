"""Data signatures: what a comparison's fingerprints know of the data (no solo-learn needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

from solo_diet.compare.plan.jobs import data_signature


def write_files(root: Path) -> Path:
    for name, size in (("a/1.png", 10), ("a/2.png", 12), ("b/1.png", 7)):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    return root


def signature(path: Path) -> str:
    data_signature.cache_clear()
    return data_signature(str(path))


def test_signature_follows_the_files_not_where_they_lie(tmp_path):
    here = write_files(tmp_path / "here")
    there = shutil.copytree(here, tmp_path / "elsewhere" / "there")
    assert signature(there) == signature(here)
    assert signature(here / "a" / "1.png") == signature(there / "a" / "1.png")
    assert signature(tmp_path / "nowhere") == f"missing: {tmp_path / 'nowhere'}"


def test_signature_changes_with_a_file_added_removed_resized_or_renamed(tmp_path):
    original = signature(write_files(tmp_path / "data"))
    seen = {original}
    (tmp_path / "data" / "b" / "2.png").write_bytes(b"y")  # added
    seen.add(signature(tmp_path / "data"))
    (tmp_path / "data" / "b" / "2.png").unlink()
    assert signature(tmp_path / "data") == original
    (tmp_path / "data" / "a" / "1.png").write_bytes(b"x" * 11)  # resized
    seen.add(signature(tmp_path / "data"))
    (tmp_path / "data" / "a" / "1.png").rename(tmp_path / "data" / "b" / "1b.png")  # moved class
    seen.add(signature(tmp_path / "data"))
    assert len(seen) == 4


def test_signature_ignores_hidden_files(tmp_path):
    original = signature(write_files(tmp_path / "data"))
    (tmp_path / "data" / ".DS_Store").write_bytes(b"finder")
    (tmp_path / "data" / "a" / ".notes").write_bytes(b"hidden")
    assert signature(tmp_path / "data") == original
