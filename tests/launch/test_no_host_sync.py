"""CUDA only: no training step of any listed method reads back from the GPU.

Every method ``solo-diet methods`` lists (but the ``linear`` probe) trains through the GPU data
path, built as ``solo-diet pretrain`` builds it (``build_model``: our same-math substitutes,
channels-last; the launcher's Trainer arguments and ``DivergenceGuard``; compare's
``EpochCostLogger``), in bf16-mixed precision, with CUDA's sync debug mode set to "error" from
the start of the second batch to the start of the fifth: three whole steps (forward, backward,
optimizer, the module's ``on_train_batch_end`` with its EMA, Lightning's bookkeeping, the
callbacks and the GPU path making the next batch). Any host synchronisation (``.item()``,
``.cpu()``, a boolean mask, a blocking copy) raises inside the step and fails the test with its
traceback.

A CPU stand-in runs the same window on any machine: it records the operations that read back
from a GPU (a tensor read as a Python number, ``nonzero``, ``masked_select``, boolean-mask
indexing, ``unique``, a tensor made from host data, but not a Python number written into a slice,
a fill on a GPU) and fails on any, for every method but those whose host reads touch host tensors
only (s-DIET's row store). It cannot see a blocking copy (W-MSE's host permutation indexing GPU
features, before our substitute) or a linear-algebra status check; the CUDA test can.

Run on a GPU machine (its fits are in the slow tier):
``python -m pytest tests/launch/test_no_host_sync.py -q -p no:cacheprovider --runslow``.
"""

import pytest
import torch

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from tests._helpers.methods import fits_of
from tests._helpers.read_back import (
    CLASSES,
    PER_CLASS,
    ReadBackRecorder,
    cases,
    check_cpu_stand_in_sees_no_read_back,
    fit_guarded,
)
from tests._helpers.synthetic import write_image_folder

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    return root


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist only on CUDA")
@pytest.mark.parametrize("method, optimizer", cases())
def test_steps_past_the_first_never_read_back(method, optimizer, data, tmp_path):
    fit_guarded(method, optimizer, data, tmp_path, cuda=True)


@pytest.mark.parametrize("method, optimizer", fits_of(cases()))
def test_cpu_stand_in_sees_no_read_back(method, optimizer, data, tmp_path):
    check_cpu_stand_in_sees_no_read_back(method, optimizer, data, tmp_path)


def test_the_stand_in_lets_a_number_written_into_a_slice_pass_and_records_the_rest():
    x = torch.ones(3, 4)
    with ReadBackRecorder() as recorder:
        x[:, :2] = 0  # a fill on a GPU (MAE's random masking)
    assert recorder.seen == []
    with ReadBackRecorder() as recorder:
        x * torch.tensor(3.0)  # a host scalar used as an operand: a copy on a GPU
        torch.tensor([1, 2])
        x[0, 0] = torch.tensor(2.0)  # a tensor (not a number) written: a copy on a GPU
    assert len(recorder.seen) == 3
    assert all("host data" in seen and __file__ in seen for seen in recorder.seen)
