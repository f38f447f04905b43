"""The decode cache of image folders: a hit skips decoding and returns the same tensor; any change
to the files, a damaged entry or an unwritable folder falls back to decoding."""

from __future__ import annotations

import os

import pytest
import torch

from solo_diet.core.data import decode_cache, tensor_data
from solo_diet.core.data.decode_cache import CACHE_ENV, cache_root
from solo_diet.core.data.tensor_data import load_images
from tests._helpers.synthetic import write_image_folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def decodes(monkeypatch):
    """Counts the files read through tensor_data.read_rgb."""
    calls = []
    read = tensor_data.read_rgb

    def counting(path):
        calls.append(path)
        return read(path)

    monkeypatch.setattr(tensor_data, "read_rgb", counting)
    return calls


def load(root, **kwargs):
    """The images, once their cache entry (written beside the run) is stored."""
    images = load_images("custom", root, "train", cache=True, **kwargs)
    while decode_cache._WRITES:  # the entries this process is still storing
        decode_cache._WRITES.popitem()[1].join()
    return images


def test_a_hit_skips_decoding_and_returns_the_same_images(tmp_path, cache, decodes):
    root = write_image_folder(tmp_path / "data", num_classes=2, per_class=3, size=8)
    first = load(root)
    assert len(decodes) == 6 and len(list(cache.glob("*.pt"))) == 1
    again = load(root)
    assert len(decodes) == 6  # nothing read
    assert torch.equal(again.images, first.images) and torch.equal(again.targets, first.targets)
    assert torch.equal(load_images("custom", root, "train").images, first.images)  # cache off
    resized = load(root, image_size=4)  # other settings: another entry
    assert resized.images.shape[-1] == 4 and len(list(cache.glob("*.pt"))) == 2


def test_a_changed_file_is_decoded_again(tmp_path, cache, decodes):
    root = write_image_folder(tmp_path / "data", num_classes=2, per_class=3, size=8)
    load(root)
    changed = sorted(root.rglob("*.png"))[0]
    write_image_folder(tmp_path / "other", num_classes=1, per_class=1, size=8, seed=7)
    changed.write_bytes(next((tmp_path / "other").rglob("*.png")).read_bytes())
    os.utime(changed, ns=(1, 1))  # even with an old time stamp
    fresh = load(root)
    assert len(decodes) == 12
    assert torch.equal(
        fresh.images[0],
        tensor_data.decode_all([str(changed)], lambda i: tensor_data.read_rgb(changed), None, 1)[0],
    )


def test_a_damaged_entry_or_an_unwritable_folder_falls_back_to_decoding(
    tmp_path, cache, decodes, monkeypatch, capsys
):
    root = write_image_folder(tmp_path / "data", num_classes=2, per_class=2, size=8)
    first = load(root)
    entry = next(cache.glob("*.pt"))
    entry.write_bytes(entry.read_bytes()[:100])  # a write cut short
    assert torch.equal(load(root).images, first.images) and len(decodes) == 8

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # cannot be created
    assert cache_root() == blocker / "cache"
    assert torch.equal(load(root).images, first.images)
    assert "decode cache not written" in capsys.readouterr().out
