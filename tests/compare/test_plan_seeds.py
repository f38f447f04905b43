"""A run is composed once and copied for its other seeds: each copy is the config a compose of
its own seed gives, and the copies share nothing."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare.plan.jobs import compose_run, plan_jobs  # noqa: E402
from solo_diet.compare.spec.load import load_spec  # noqa: E402
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images  # noqa: E402

pytestmark = pytest.mark.solo


def test_each_seed_copy_is_its_own_compose(tmp_path):
    overrides = tiny_overrides(write_tiny_images(tmp_path / "images"), tmp_path / "out")
    runs = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
    spec = load_spec(SHIPPED_SPEC, [*overrides, "reference_rows=[]", runs, "seeds=[0,1,2]"])
    jobs = plan_jobs(spec)
    assert [(job.name, job.seed) for job in jobs] == [
        (name, seed) for name in ("diet", "simclr") for seed in (0, 1, 2)
    ]
    runs_by_name = {run.name: run for run in spec.runs}
    for job in jobs:
        cfg, budget = compose_run(spec, runs_by_name[job.name], job.run_dir, job.seed)
        assert OmegaConf.to_yaml(job.cfg) == OmegaConf.to_yaml(cfg), job.key
        assert job.budget == budget
    jobs[1].cfg.optimizer.lr = 123.0  # a copy of its own, not a view of seed 0's
    assert jobs[0].cfg.optimizer.lr != 123.0 and jobs[2].cfg.optimizer.lr != 123.0
