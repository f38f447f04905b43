"""Where a comparison's jobs run: the fleet's sharing, and the reusable workers ``solo-diet
compare`` starts before its own imports (their imports overlap its own and its planning)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from solo_diet.compare.run.sharing import fleet_of
from solo_diet.compare.spec.load import load_spec
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


def spec_of(data_root: Path, tmp_path: Path, *overrides: str):
    runs = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
    return load_spec(SHIPPED_SPEC, [*tiny_overrides(data_root, tmp_path / "out"), runs, *overrides])


def test_the_fleet_starts_a_worker_a_slot_before_its_plan_exists_and_ends_them(data_root, tmp_path):
    spec = spec_of(data_root, tmp_path, "parallel.workers=3", "reference_rows=[]")
    assert spec.chosen_jobs() == 2
    with fleet_of(spec, start_workers=True) as fleet:
        assert fleet.workers == 3 and len(fleet.started) == 2  # no more workers than jobs
        assert not fleet.plan_file.exists() and fleet.plan_file.parent.is_dir()
        for worker in fleet.started:
            assert worker.process.poll() is None
            assert worker.process.args[-3:-1] == ["--serve", str(fleet.plan_file)]
    assert all(worker.process.poll() is not None for worker in fleet.started)
    assert not fleet.plan_file.parent.exists()


@pytest.mark.parametrize(
    "overrides", [("parallel.workers=1",), ("parallel.workers=2", "parallel.reuse_workers=false")]
)
def test_no_worker_starts_early_for_one_at_a_time_or_fresh_processes(
    data_root, tmp_path, overrides
):
    spec = spec_of(data_root, tmp_path, *overrides)
    with fleet_of(spec, start_workers=True) as fleet:
        assert fleet.started == ()


def test_the_spec_and_the_fleet_load_without_torch_lightning_or_solo_learn():
    import subprocess

    code = (
        "import sys; import solo_diet.compare.run.sharing, solo_diet.compare.spec.load; "
        "print(sorted({'torch', 'lightning', 'solo', 'timm'} & set(sys.modules)))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "[]", out.stderr
