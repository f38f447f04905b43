"""A spec or a result that cannot be used is one line naming the file and the key, before any run
folder or report is written: bytes that are not UTF-8, a YAML list, an output folder under a file,
a run's bad ``method_kwargs``, a val split that is the train split or holds other classes, an
output folder inside a split, and a planted ``result.json`` under ``--report-only``."""

from __future__ import annotations

import json
import math

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import run_spec
from solo_diet.compare.plan.jobs import plan_jobs
from solo_diet.compare.run.record import read_result
from solo_diet.compare.spec.load import load_spec
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_tiny_images(tmp_path_factory.mktemp("data"))


def test_a_spec_file_that_is_not_utf8_or_not_a_mapping_is_named(tmp_path):
    (tmp_path / "bytes.yaml").write_bytes(b"name: x\noutput_dir: \xff\n")
    with pytest.raises(ConfigError, match=r"bytes.yaml: not UTF-8 text \(byte 0xff at offset 20\)"):
        load_spec(tmp_path / "bytes.yaml")
    (tmp_path / "list.yaml").write_text("- output_dir: out\n")
    with pytest.raises(ConfigError) as refused:
        load_spec(tmp_path / "list.yaml")
    assert str(refused.value).startswith(f"{tmp_path}/list.yaml: a spec is a YAML mapping of spec")
    assert str(refused.value).endswith("got a list.")


def test_an_output_dir_under_a_file_is_refused_before_anything_is_written(data, tmp_path):
    (tmp_path / "file").touch()
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, tiny_overrides(data, tmp_path / "file" / "out"))
    assert f"`output_dir` {tmp_path}/file/out: {tmp_path}/file is a file" in str(refused.value)


def test_a_runs_bad_method_kwargs_fail_before_any_run_folder(data, tmp_path):
    run = "{name: smooth, config_name: diet.yaml, overrides: [method_kwargs.label_smoothing=2]}"
    overrides = [*tiny_overrides(data, tmp_path / "out"), f"runs=[{run}]"]
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, overrides)
    assert str(refused.value) == (
        "run 'smooth': `method_kwargs.label_smoothing` must be in [0.0, 1.0), got 2."
    )
    assert not (tmp_path / "out").exists()


def test_a_val_split_that_is_the_train_split_is_refused(data, tmp_path):
    overrides = [*tiny_overrides(data, tmp_path / "out"), f"data.val_path={data}/train/"]
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, overrides)
    assert str(refused.value) == (
        f"`data.val_path` must be another folder than `data.train_path`, got {data}/train/ for "
        "both: the probes would be scored on their own training images; pass the held-out split."
    )
    assert not (tmp_path / "out").exists()


def test_an_output_dir_inside_a_split_is_refused_before_it_becomes_a_class(data, tmp_path):
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, tiny_overrides(data, data / "train" / "out"))
    assert str(refused.value) == (
        f"`output_dir` must be outside `data.train_path`, got {data}/train/out in {data}/train: "
        "its folders would be read as a class of images; pass another output_dir."
    )
    assert not (data / "train" / "out").exists()


def test_a_val_split_with_other_classes_is_refused_before_any_job(tmp_path):
    data = write_tiny_images(tmp_path / "data")
    (data / "val" / "class_4").rename(data / "val" / "class_9")
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, tiny_overrides(data, tmp_path / "out"))
    assert str(refused.value) == (
        f"`data.val_path` = {data}/val and `data.train_path` = {data}/train hold different class "
        "folders (only in val: ['class_9'], only in train: ['class_4']), so the val labels would "
        "not match the trained ones: give both the same class subfolders."
    )
    assert not (tmp_path / "out").exists()


PLANTED = [
    ({"linear_acc1": 1e308}, "`linear_acc1` holds an infinite or absurd number ('1e+308')"),
    ({"knn_acc1": math.inf}, "`knn_acc1` holds an infinite or absurd number ('inf')"),
    ({"rankme": "12"}, "`rankme` holds text where a number belongs ('12')"),
    ({"device": "<script>x</script>"}, "`device` holds markup ('<script>x</script>')"),
]


@pytest.mark.parametrize("planted, message", PLANTED, ids=[m.split("`")[1] for _, m in PLANTED])
def test_report_only_refuses_a_planted_result_naming_file_and_field(
    data, tmp_path, planted, message
):
    overrides = tiny_overrides(data, tmp_path / "out")
    spec = load_spec(SHIPPED_SPEC, overrides)
    (job, *_) = plan_jobs(spec)
    job.run_dir.mkdir(parents=True)
    path = job.run_dir / "result.json"
    path.write_text(json.dumps({"run": job.name, "linear_acc1": 50.0, "lidar": math.nan} | planted))
    with pytest.raises(ConfigError) as refused:
        run_spec(SHIPPED_SPEC, overrides, report_only=True)
    assert str(refused.value).startswith(f"{path}: {message}: delete the file")
    assert not (tmp_path / "out" / "report.md").exists()


def test_a_result_that_is_not_json_is_named_and_nan_stays(tmp_path):
    path = tmp_path / "result.json"
    path.write_text('{"run": "a", "lidar": NaN, "seed": null, "linear_fitted_batch": {"b": 1}}')
    assert math.isnan(read_result(path)["lidar"])
    path.write_text("{cut")
    with pytest.raises(ConfigError, match=r"result.json is no result \(it holds not JSON"):
        read_result(path)
