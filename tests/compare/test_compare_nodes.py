"""``solo-diet compare`` refuses ``num_nodes > 1`` in one line before any job starts: its jobs run
on the GPUs of one machine (docs/multi-node.md)."""

from __future__ import annotations

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import run_compare
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo


@pytest.mark.parametrize(
    "extra, owner",
    [
        (["trainer=[accelerator=cpu,precision=32,data.num_workers=0,++num_nodes=2]"], "`linear`"),
        (["runs=[{name: diet, config_name: diet, overrides: [++num_nodes=2]}]"], "run 'diet'"),
    ],
)
def test_several_nodes_are_refused_before_any_job(tmp_path, extra, owner):
    data_root = write_tiny_images(tmp_path / "images")
    message = rf"{owner}: `num_nodes=2`: solo-diet compare runs on one machine; train over several"
    with pytest.raises(ConfigError, match=message):
        run_compare(SHIPPED_SPEC, tiny_overrides(data_root, tmp_path / "out") + extra)
    assert not (tmp_path / "out" / "runs").exists()
