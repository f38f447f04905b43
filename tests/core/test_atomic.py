"""Files written whole or not at all (solo_diet.core.atomic): a failed write keeps the previous
file, concurrent writers never break each other, killed writers' temporary files are cleaned up."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from solo_diet.core.atomic import atomic_write, remove_stale_temporaries, write_text_atomic


def test_a_write_that_fails_midway_keeps_the_previous_file_and_no_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "report.md", "previous report\n")
    with pytest.raises(OSError, match="disk full"):
        with atomic_write(path) as f:
            f.write("half of the new")
            raise OSError(28, "disk full")
    assert path.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_the_file_gets_the_permissions_a_plain_write_gives(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert (write_text_atomic(tmp_path / "atomic", "x").stat().st_mode) == plain.stat().st_mode


def test_concurrent_writers_of_one_file_never_fail_and_leave_one_whole_version(tmp_path):
    path, errors = tmp_path / "state.json", []
    versions = {name: f'{{"writer": "{name}", "pad": "{name * 2000}"}}' for name in "ab"}

    def write_many(name: str) -> None:
        try:
            for _ in range(300):
                write_text_atomic(path, versions[name])
        except Exception as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=write_many, args=(name,)) for name in versions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and path.read_text() in versions.values()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_only_the_temporary_files_of_dead_writers_are_removed(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    dead = int(done.stdout)
    stale = tmp_path / f".x-ep=3.ckpt.{dead}.0123abcd.tmp"
    live = tmp_path / f".x-ep=4.ckpt.{os.getpid()}.89abcdef.tmp"
    other = tmp_path / ".notes.tmp"
    for path in (stale, live, other):
        path.write_bytes(b"partial")
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_binary_mode_writes_bytes(tmp_path):
    with atomic_write(tmp_path / "a.ckpt", binary=True) as f:
        f.write(b"\x00PK")
    assert Path(tmp_path / "a.ckpt").read_bytes() == b"\x00PK"
