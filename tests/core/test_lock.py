"""Folder locks (solo_diet.core.lock): a second holder is refused naming the first, a lock its
holder no longer holds is taken over with a line, another host's lock is refused, and a released
lock is an empty file."""

from __future__ import annotations

import json
import os
import socket

import pytest

from solo_diet.core.lock import FolderInUse, folder_lock


def hold(path, said: list | None = None):
    say = (said if said is not None else []).append
    return folder_lock(path, "pretrain", f"the run folder {path.parent}", "pass another", say)


def test_a_second_holder_is_refused_in_one_line_naming_the_first(tmp_path):
    path = tmp_path / ".run.lock"
    with hold(path):
        record = json.loads(path.read_text())
        assert record["pid"] == os.getpid() and record["command"] == "pretrain"
        with pytest.raises(FolderInUse) as refused:
            with hold(path):
                pass
    assert str(refused.value) == (
        f"the run folder {tmp_path} is in use by `solo-diet pretrain` PID {os.getpid()} on "
        f"{socket.gethostname()} (started {record['started']}): wait for it to end, or pass "
        "another."
    )
    assert path.read_text() == ""  # released: free again
    with hold(path):
        pass


def test_a_lock_whose_holder_is_gone_is_taken_over_and_another_hosts_is_refused(tmp_path):
    path, said = tmp_path / ".run.lock", []
    gone = {"pid": os.getpid() + 1, "host": socket.gethostname(), "started": "earlier"}
    path.write_text(json.dumps(gone))  # what a kill -9 leaves: the record, no flock
    with hold(path, said):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert said == [
        f"taking over the lock {path} of `solo-diet pretrain` PID {gone['pid']} on "
        f"{socket.gethostname()} (started earlier), which no longer runs (killed or crashed)"
    ]
    path.write_text(json.dumps(gone | {"host": "elsewhere", "command": "linear"}))
    with pytest.raises(FolderInUse, match=r"locked by `solo-diet linear` PID .* on elsewhere"):
        with hold(path):
            pass
