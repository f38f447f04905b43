"""The fan-out's job order: runs never measured first, then the longest recorded pretraining
first, reference rows last, raw pixels first of them (no solo-learn needed)."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from solo_diet.compare.plan.jobs import Job, longest_first


def job(out: Path, name: str, seed, reference: bool = False) -> Job:
    if reference:
        key = f"references/{name}"
    else:
        key = f"runs/{name}" + (f"/seed_{seed}" if seed is not None else "")
    return Job(name, key, out / key, OmegaConf.create({}), seed, name if reference else None)


def record(out: Path, key: str, pretrain_wall_s: float) -> None:
    folder = out / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps({"pretrain_wall_s": pretrain_wall_s}))


def names(jobs: list[Job]) -> list[str]:
    return [j.name for j in jobs]


def test_seed_one_starts_with_the_runs_that_took_longest_at_seed_zero(tmp_path):
    record(tmp_path, "runs/diet/seed_0", 190.0)
    record(tmp_path, "runs/byol/seed_0", 690.0)
    record(tmp_path, "runs/simclr/seed_0", 540.0)
    record(tmp_path, "runs/simclr/seed_2", 560.0)  # the longest record of a run counts
    planned = [job(tmp_path, n, 1) for n in ("diet", "simclr", "new", "byol")]
    planned.append(job(tmp_path, "random_init", 1, reference=True))
    planned.append(job(tmp_path, "raw_pixels", 1, reference=True))
    expected = ["new", "byol", "simclr", "diet", "raw_pixels", "random_init"]
    assert names(longest_first(planned)) == expected


def test_without_records_or_seeds_the_spec_order_stays(tmp_path):
    planned = [job(tmp_path, n, None) for n in ("diet", "simclr", "byol")]
    assert names(longest_first(planned)) == ["diet", "simclr", "byol"]
    record(tmp_path, "runs/diet", 100.0)
    record(tmp_path, "runs/byol", 50.0)
    assert names(longest_first(planned)) == ["simclr", "diet", "byol"]
