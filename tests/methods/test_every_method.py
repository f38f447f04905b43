"""Every registered pretraining method, built from its contract and stepped once by hand on the CPU
(no Trainer): the fast tier's check of each method, a method added by docs/adding-a-method.md
included with no test edited. The slow tier fits each through every data path."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from tests._helpers.methods import check_one_training_step, registered_methods

pytestmark = pytest.mark.solo


@pytest.mark.parametrize("method", registered_methods())
def test_one_training_step_by_hand(method):
    check_one_training_step(method)
