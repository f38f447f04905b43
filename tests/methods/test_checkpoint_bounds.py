"""A checkpoint is bounded before it is read: a zip bomb is refused by its declared sizes, a damaged
pickle is called damaged (never "needs pickle"), and a checkpoint of another shape or of a linear
probe is one line naming the fix."""

from __future__ import annotations

import io
import json
import resource
import time
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from solo_diet.core.errors import ConfigError
from solo_diet.launch.errors import run_guarded
from solo_diet.methods.checkpoint import (
    CorruptCheckpoint,
    UnsafeCheckpoint,
    checkpoint_problem,
    load_backbone_weights,
    load_checkpoint_file,
    read_pretrain_args,
)


def rewritten(path: Path, data_pkl: object, compression: int = zipfile.ZIP_STORED) -> Path:
    """A real torch checkpoint rewritten with ``data.pkl`` replaced: bytes, or a count of MiB of
    zeros streamed in (a zip bomb when deflated)."""
    buffer = io.BytesIO()
    torch.save({"state_dict": {"backbone.weight": torch.zeros(4)}}, buffer)
    source = zipfile.ZipFile(buffer)
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for info in source.infolist():
            if not info.filename.endswith("data.pkl"):
                archive.writestr(info.filename, source.read(info))
            elif isinstance(data_pkl, bytes):
                archive.writestr(info.filename, data_pkl)
            else:
                with archive.open(info.filename, "w", force_zip64=True) as f:
                    for _ in range(data_pkl):
                        f.write(bytes(1 << 20))
    return path


def test_a_zip_bomb_is_refused_by_its_declared_sizes_without_unpacking(tmp_path):
    bomb = rewritten(tmp_path / "bomb.ckpt", 96, zipfile.ZIP_DEFLATED)  # 96 MiB in ~100 kB
    assert bomb.stat().st_size < 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(CorruptCheckpoint) as refused:
        load_checkpoint_file(bomb)
    problem = checkpoint_problem(bomb)
    assert time.perf_counter() - started < 2
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 48  # unpacked, it would take 96 MiB
    assert "it is corrupt or hostile: its zip entries unpack to 100,663," in str(refused.value)
    assert problem.startswith("it is corrupt or hostile") and "pickle" not in str(refused.value)


def test_a_damaged_pickle_is_called_damaged_and_a_real_one_names_the_opt_in_of_both(tmp_path):
    garbage = rewritten(tmp_path / "garbage.ckpt", bytes(50))
    with pytest.raises(CorruptCheckpoint) as damaged:
        load_checkpoint_file(garbage)
    assert "cut short or damaged" in str(damaged.value) and "allow_pickle" not in str(damaged.value)

    torch.save({"state_dict": {}, "extra": io.BytesIO()}, tmp_path / "pickled.ckpt")
    with pytest.raises(UnsafeCheckpoint) as unsafe:
        load_checkpoint_file(tmp_path / "pickled.ckpt")
    assert "only pickle can rebuild (" in str(unsafe.value) and "BytesIO" in str(unsafe.value)
    assert "`++allow_pickle_checkpoint=True` (pretrain and linear) loads it" in str(unsafe.value)


def test_a_backbone_of_another_width_is_one_line_naming_the_tensor(tmp_path, capsys):
    path = tmp_path / "wide.ckpt"
    torch.save(
        {"state_dict": {"backbone.weight": torch.zeros(64, 3), "backbone.bias": torch.zeros(64)}},
        path,
    )

    def load() -> int:
        load_backbone_weights(nn.Linear(3, 32), path)
        return 0

    assert run_guarded("linear", load) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"checkpoint {path} does not match the configured backbone" in line
    assert "size mismatch for weight: copying a param with shape torch.Size([64, 3])" in line
    assert "(2 tensor(s) differ)" in line


def test_a_linear_probes_checkpoint_names_the_one_it_probed(tmp_path):
    probe = tmp_path / "linear-ep=0.ckpt"
    probe.touch()
    args = {"pretrained_feature_extractor": "runs/diet/x/diet-ep=9.ckpt", "backbone": {}}
    (tmp_path / "args.json").write_text(json.dumps(args))
    with pytest.raises(ConfigError) as refused:
        read_pretrain_args(probe)
    assert str(refused.value) == (
        f"{probe} is a linear probe's checkpoint, not a pretraining one: pass the one it probed, "
        "runs/diet/x/diet-ep=9.ckpt."
    )
