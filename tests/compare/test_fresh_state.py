"""What a job changes in a reusable worker's process is put back before the next job
(:class:`solo_diet.compare.run.worker.FreshState`), and its CUDA memory is given back."""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import warnings

import numpy as np
import pytest
import torch

from solo_diet.compare.run.worker import FreshState, free_memory


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_a_job_leaves_nothing_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLO_DIET_FRESH_TEST", "before")
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # an earlier test's seed_everything sets it
    deterministic = torch.are_deterministic_algorithms_enabled()
    before_cwd, before_threads = os.getcwd(), torch.get_num_threads()
    handler = signal.getsignal(signal.SIGTERM)
    logger = logging.getLogger("solo_diet.fresh_test")  # a logger that exists before the job
    level, handlers = logger.level, list(logger.handlers)
    fresh = FreshState()
    expected = _draws()
    fresh.restore()
    try:
        with fresh.job():  # what a job may do
            torch.manual_seed(7)
            random.seed(7)
            np.random.seed(7)
            _draws()
            os.environ["PL_GLOBAL_SEED"] = "7"
            os.environ["SOLO_DIET_FRESH_TEST"] = "after"
            os.chdir(tmp_path)
            sys.path.append(str(tmp_path))
            torch.set_float32_matmul_precision("medium")
            torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
            torch.use_deterministic_algorithms(True)
            torch.set_num_threads(before_threads + 1)
            torch.set_default_dtype(torch.float64)
            signal.signal(signal.SIGTERM, lambda *_: None)
            logger.setLevel(logging.CRITICAL)
            logger.addHandler(logging.NullHandler())
            warnings.simplefilter("error")
        assert ("error", None, Warning, None, 0) not in warnings.filters
        fresh.restore()

        assert _draws() == expected  # the generators as they were
        assert "PL_GLOBAL_SEED" not in os.environ
        assert os.environ["SOLO_DIET_FRESH_TEST"] == "before"
        assert os.getcwd() == before_cwd and str(tmp_path) not in sys.path
        assert torch.get_float32_matmul_precision() == fresh.switches["float32_matmul_precision"]
        assert torch.backends.cudnn.benchmark == fresh.switches["cudnn.benchmark"]
        assert torch.are_deterministic_algorithms_enabled() == deterministic
        assert torch.get_num_threads() == before_threads
        assert torch.get_default_dtype() == torch.float32
        assert signal.getsignal(signal.SIGTERM) == handler
        assert logger.level == level and logger.handlers == handlers
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_default_dtype(torch.float32)
        torch.set_num_threads(before_threads)
        os.chdir(before_cwd)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_jobs_cuda_memory_is_given_back():
    free_memory()
    base = torch.cuda.memory_reserved()
    held = torch.ones(64, 2**20, device="cuda")
    del held
    assert torch.cuda.memory_reserved() > base  # the caching allocator keeps it
    free_memory()
    assert torch.cuda.memory_reserved() == base
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()  # peak reset
