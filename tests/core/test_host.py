"""The plugin without solo-learn: the core imports, registration fails with one clear message."""

import importlib

import pytest

from solo_diet._host import INSTALL_HINT, SoloLearnMissing, require_solo, solo_problem


def test_torch_only_core_imports():
    for module in (
        "solo_diet.losses",
        "solo_diet.nn",
        "solo_diet.optim",
        "solo_diet.rowstore",
        "solo_diet.metrics",
        "solo_diet.labels",
        "solo_diet.backbones",
        "solo_diet.samplers",
    ):
        importlib.import_module(module)


@pytest.mark.skipif(solo_problem() is None, reason="solo-learn main is installed here")
def test_without_solo_learn_registration_says_how_to_install():
    import solo_diet

    with pytest.raises(SoloLearnMissing, match="git clone https://github.com/vturrisi/solo-learn"):
        solo_diet.register()


@pytest.mark.skipif(solo_problem() is not None, reason="needs solo-learn main")
def test_with_solo_learn_nothing_is_reported():
    require_solo()
    assert "--no-build-isolation --use-pep517" in INSTALL_HINT and "1.0.2" in INSTALL_HINT
