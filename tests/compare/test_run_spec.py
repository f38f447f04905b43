"""``run_spec`` as a library: a spec given as a mapping, the records it returns against the ones it
wrote (``result.json`` of every job, the per-seed rows of ``results.csv``), a second call that
starts nothing."""

from __future__ import annotations

import copy
import csv
import json
import shlex

import pytest
from omegaconf import OmegaConf

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import CompareResults, run_spec
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo


def shipped_spec_as_mapping() -> dict:
    """The shipped spec as a dict, its relative paths made absolute (a mapping's paths are relative
    to the current directory)."""
    spec = OmegaConf.to_container(OmegaConf.load(SHIPPED_SPEC))
    folder = SHIPPED_SPEC.parent
    spec["config_path"] = str(folder / spec["config_path"])
    spec["linear"]["config_path"] = str(folder / spec["linear"]["config_path"])
    augmentations = spec["evaluation"]["lidar_augmentations"]
    spec["evaluation"]["lidar_augmentations"] = str(folder / augmentations)
    return spec


def csv_cell(value: object) -> str:
    return "" if value is None else str(value)


def test_run_spec_returns_the_records_it_wrote(tmp_path):
    data_root, out = write_tiny_images(tmp_path / "images"), tmp_path / "out"
    spec = shipped_spec_as_mapping()
    given = copy.deepcopy(spec)
    overrides = tiny_overrides(data_root, out) + [
        "runs=[{name: diet, config_name: diet}]",
        "seeds=[0,1]",
        "reference_rows=[raw_pixels]",
    ]

    results = run_spec(spec, overrides)

    assert isinstance(results, CompareResults) and spec == given  # the caller's mapping kept
    assert results.ok and results.failures == {} and results.started == 3
    assert results.report == out / "report.md" and results.report.is_file()
    assert results.spec.output_dir == out and results.left_out == ()
    assert [(r["run"], r["seed"]) for r in results.records] == [
        ("diet", 0),
        ("diet", 1),
        ("raw_pixels", None),
    ]
    assert [r["seed"] for r in results.of_run("diet")] == [0, 1]
    job_folders = [out / "runs" / "diet" / "seed_0", out / "runs" / "diet" / "seed_1"]
    job_folders.append(out / "references" / "raw_pixels")
    for record, folder in zip(results.records, job_folders):
        assert record == json.loads((folder / "result.json").read_text())
    with (out / "results.csv").open() as f:
        per_seed = [row for row in csv.DictReader(f) if row["seed"] != "mean"]
    assert len(per_seed) == len(results.records)
    for row, record in zip(per_seed, results.records):
        assert row["run"] == record["run"] and row["linear_acc1"] != ""
        assert {c: v for c, v in row.items() if c in record} == {
            c: csv_cell(record[c]) for c in row if c in record
        }
    rerun = shlex.join(["solo-diet", "compare", str(out / "spec.yaml"), *overrides])
    assert (out / "commands.txt").read_text().endswith(f"\t{rerun}\n")  # the resolved spec

    again = run_spec(spec, overrides)  # every result stands: nothing starts

    assert again.started == 0 and again.ok and again.records == results.records


def test_run_spec_refuses_what_is_not_a_spec(tmp_path):
    with pytest.raises(ConfigError, match="a YAML file's path or a mapping, got list"):
        run_spec(["runs"])
    with pytest.raises(ConfigError, match=r"the spec: `budget.epochs` is not a key of `budget`"):
        run_spec({**shipped_spec_as_mapping(), "output_dir": str(tmp_path)}, ["budget.epochs=1"])
    with pytest.raises(
        ConfigError, match=r"the spec: `runz` is not a spec key; did you mean `runs`"
    ):
        run_spec({"runz": []})
