"""How many jobs share a GPU and whether under MPS (``parallel.jobs_per_gpu: null``,
``parallel.mps``): the choice from cores, GPUs and jobs, its one line, and a refused ``on``."""

from __future__ import annotations

import os

import pytest

from solo_diet.compare.run.sharing import choose_sharing, mps_unavailable, private_mps
from solo_diet.core.errors import ConfigError


@pytest.mark.parametrize("cores, gpus, jobs, no_mps, expected, mps", [
    (16, 1, 11, "", 4, True),  # an H200 machine: 4 cores a job, MPS
    (16, 1, 11, "no MPS", 2, False),  # without MPS kernels take turns: at most 2
    (16, 1, 3, "", 3, True),  # no more slots than jobs
    (32, 2, 11, "", 4, True),
    (8, 1, 11, "", 2, True),  # 4 cores a job
    (2, 1, 11, "", 1, False),  # one job alone never asks for MPS
    (128, 8, 40, "", 4, True),
])  # fmt: skip
def test_auto_gives_each_job_four_cores_and_no_more_slots_than_jobs(
    cores, gpus, jobs, no_mps, expected, mps
):
    sharing = choose_sharing(None, "auto", gpus, cores, jobs, no_mps)
    assert (sharing.jobs_per_gpu, sharing.mps) == (expected, mps)
    assert sharing.why.startswith(f"{expected} job(s) per GPU (auto: {cores} cores, {gpus} GPU(s)")
    assert "\n" not in sharing.why


def test_a_number_is_kept_and_mps_follows_its_setting():
    assert choose_sharing(3, "auto", 1, 2, 9, "").jobs_per_gpu == 3
    assert choose_sharing(3, "auto", 1, 2, 9, "").mps
    assert not choose_sharing(3, "off", 1, 2, 9, "").mps
    assert not choose_sharing(1, "auto", 1, 16, 9, "").mps
    reason = choose_sharing(2, "auto", 1, 16, 9, "no `nvidia-cuda-mps-control` on PATH").why
    assert reason.endswith("without MPS (no `nvidia-cuda-mps-control` on PATH)")


def test_without_gpus_one_job_at_a_time_and_an_impossible_on_is_one_line():
    assert choose_sharing(None, "auto", 0, 16, 9, "no GPU") == choose_sharing(
        4, "off", 0, 16, 9, "no GPU"
    )
    assert choose_sharing(None, "auto", 0, 16, 9, "no GPU").jobs_per_gpu == 1
    with pytest.raises(ConfigError) as refused:
        choose_sharing(None, "on", 0, 16, 9, "no GPU")
    assert str(refused.value) == "`parallel.mps: on` cannot be honoured: no GPU. Use auto or off."


def test_mps_is_unavailable_without_gpus_or_its_control_program(monkeypatch):
    assert mps_unavailable([]) == "no GPU"
    monkeypatch.setenv("PATH", "")
    assert mps_unavailable(["0"]) == "no `nvidia-cuda-mps-control` on PATH"


def test_an_inactive_or_inherited_daemon_starts_nothing(monkeypatch):
    before = dict(os.environ)
    with private_mps(False):
        assert dict(os.environ) == before
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/somewhere")
    with private_mps(True):  # the caller's daemon, used as it is
        assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == "/somewhere"
