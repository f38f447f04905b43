"""The plugin without solo-learn: the core imports, registration fails with one clear message."""

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solo_diet.host import INSTALL_HINT, SoloLearnMissing, require_solo, solo_problem

REPO = Path(__file__).resolve().parents[1]


def test_torch_only_core_imports():
    for module in (
        "solo_diet.core.losses",
        "solo_diet.core.nn",
        "solo_diet.core.sdiet.optim",
        "solo_diet.core.sdiet.rowstore",
        "solo_diet.core.metrics",
        "solo_diet.core.labels",
        "solo_diet.core.backbones",
        "solo_diet.core.sdiet.samplers",
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


SKIP_THEN_REPORT = (
    "import sys\n"
    "from solo_diet.host import UMAP_CALLBACK, skip_umap_callback_without_umap\n"
    "skip_umap_callback_without_umap()\n"
    "print(UMAP_CALLBACK in sys.modules and sys.modules[UMAP_CALLBACK] is None)\n"
)


@pytest.mark.parametrize("with_umap", [False, True])
def test_solo_learns_umap_callback_is_skipped_only_without_umap(tmp_path, with_umap):
    """Without umap, importing the callback fails at once (it would fail at `import umap` after
    pandas, seaborn and matplotlib); with umap it is left alone."""
    if not with_umap and importlib.util.find_spec("umap") is not None:
        pytest.skip("umap is installed in this environment")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    if with_umap:
        (tmp_path / "umap").mkdir()
        (tmp_path / "umap" / "__init__.py").write_text("")
    done = subprocess.run(
        [sys.executable, "-c", SKIP_THEN_REPORT], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(not with_umap)


@pytest.mark.skipif(solo_problem() is not None, reason="needs solo-learn main")
def test_the_method_names_read_from_source_hold_every_registered_one():
    """The names the CLI checks ``method`` against before importing solo-learn (a superset)."""
    import inspect

    from lightning.pytorch import Trainer
    from solo.methods import METHODS

    import solo_diet
    from solo_diet.host import declared_method_names
    from solo_diet.launch.launch_checks import trainer_arguments

    solo_diet.register()
    assert set(METHODS) <= declared_method_names()
    assert trainer_arguments() == tuple(inspect.signature(Trainer.__init__).parameters)


def test_the_method_names_come_from_source_in_a_fresh_process(monkeypatch):
    """What a new ``solo-diet pretrain`` process reads before anything registers: our method files
    (``registered_as``) and solo-learn's ``METHODS`` source, not this process's registry."""
    from solo_diet.host import declared_method_names

    monkeypatch.delitem(sys.modules, "solo.methods", raising=False)
    names = declared_method_names()
    if names is None:
        pytest.skip("solo-learn is not installed")
    assert {"diet", "sdiet", "cplearn", "diet_sem", "simclr"} <= names


def test_the_known_noise_of_a_run_is_silenced_and_the_rest_stays():
    """What every run of solo-learn's stack prints (Lightning's INFO banners, solo-learn's
    scheduler_interval warning, torch's CPU pin_memory warning) is dropped; other lines stay."""
    import logging
    import warnings

    from solo_diet import host as _host

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _host.quiet_run_noise()
            logging.getLogger("lightning.pytorch.utilities.rank_zero").info("GPU available: False")
            logging.getLogger("lightning.fabric.utilities.seed").info("Seed set to 5")
            logging.warning(f"{_host.SCHEDULER_INTERVAL_NOISE} a checkpoint.")
            logging.warning("a genuine warning")
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then")
            warnings.warn("a genuine user warning")
    finally:
        root.removeHandler(handler)
        root.removeFilter(_host._not_scheduler_interval_noise)
    assert said == ["a genuine warning"]
    assert [str(w.message) for w in caught] == ["a genuine user warning"]
