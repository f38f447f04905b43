"""A reusable worker (``parallel.reuse_workers``) runs job after job in one process, and each job
gives exactly what it gives in a fresh process: the same metrics and the same trained weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare.plan.jobs import evaluation_fingerprint, plan_jobs
from solo_diet.compare.run.runner import _run_in_processes
from solo_diet.compare.run.sharing import fleet_of
from solo_diet.compare.run.worker import save_plan
from solo_diet.compare.spec.load import load_spec
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo

RUNS = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
# what differs between two sessions of the same job: where and when it ran, and its speed
NOT_COMPARED = {"checkpoint", "finished_utc", "device", "job", "recipe", "fingerprint"}


def _run(tmp_path: Path, reuse: bool) -> Path:
    data_root = write_tiny_images(tmp_path / "images")
    out = tmp_path / "cmp"
    reused = [f"parallel.reuse_workers={reuse}", "parallel.workers=1"]
    spec = load_spec(
        SHIPPED_SPEC,
        tiny_overrides(data_root, out) + [RUNS, "reference_rows=[random_init]", *reused],
    )
    out.mkdir()
    jobs = plan_jobs(spec)
    with fleet_of(spec) as fleet:
        save_plan(fleet.plan_file, spec, jobs, evaluation_fingerprint(spec))
        assert _run_in_processes(jobs, fleet, spec.parallel.reuse_workers) == {}
    return out


def _comparable(result: dict) -> dict:
    return {
        key: value
        for key, value in result.items()
        if key not in NOT_COMPARED and not key.endswith(("_s", "samples_per_s", "_mib"))
    }


def _weights(out: Path, key: str) -> dict[str, torch.Tensor]:
    result = json.loads((out / key / "result.json").read_text())
    return torch.load(result["checkpoint"], map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.slow
def test_jobs_in_one_reused_worker_equal_jobs_in_fresh_processes(tmp_path):
    reused = _run(tmp_path / "reused", reuse=True)
    fresh = _run(tmp_path / "fresh", reuse=False)

    keys = ["runs/diet", "runs/simclr", "references/random_init"]
    headers = {
        key: (reused / key / "job.log").read_text().splitlines()[0].split(" (in worker ")[1]
        for key in keys
    }
    worker = headers["runs/diet"].split(",")[0]
    assert [headers[k] for k in keys] == [f"{worker}, its task {i})" for i in (1, 2, 3)]
    assert all(" (in worker " not in (fresh / k / "job.log").read_text() for k in keys)
    for key in keys:
        mine, theirs = (json.loads((o / key / "result.json").read_text()) for o in (reused, fresh))
        assert _comparable(mine) == _comparable(theirs), key
        assert "linear_acc1" in _comparable(mine) and "rankme" in _comparable(mine)
    for key in keys[:2]:
        mine, theirs = _weights(reused, key), _weights(fresh, key)
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[name], theirs[name]) for name in mine), key


def test_reuse_workers_must_be_a_boolean(tmp_path):
    data_root = write_tiny_images(tmp_path / "images")
    overrides = tiny_overrides(data_root, tmp_path / "cmp") + ["parallel.reuse_workers=sometimes"]
    with pytest.raises(
        ConfigError, match="`parallel.reuse_workers` must be True or False, got 'sometimes'"
    ):
        load_spec(SHIPPED_SPEC, overrides)
