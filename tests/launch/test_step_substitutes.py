"""``solo-diet pretrain`` runs solo-learn's ``lars`` as ``ForeachLARS`` and says so in one line of
its log; ``performance.foreach_substitutes`` turns that off and takes only a bool."""

import pytest

from tests._helpers import NEEDS_SOLO, SCRIPTS

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.cli.main import main
from solo_diet.core.errors import ConfigError
from solo_diet.launch.pretrain import run_pretrain
from tests._helpers.gpu_path import pretrain_argv, write_images

pytestmark = pytest.mark.solo


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("data"))


SUBSTITUTED = "solo-diet: same-math substitutes (no host sync per step): optimizer `lars` -> "


def substitute_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("solo-diet: same-math")]


@pytest.mark.parametrize("setting, expected", [(None, 1), ("False", 0)])
def test_pretrain_names_the_substitute_once_unless_turned_off(
    setting, expected, data, tmp_path, capsys
):
    argv = pretrain_argv(data, tmp_path, "diet_cf") + ["max_epochs=1", "++limit_val_batches=0"]
    if setting is not None:
        argv.append(f"++performance.foreach_substitutes={setting}")
    assert main(argv) == 0
    lines = substitute_lines(capsys.readouterr().out)
    assert len(lines) == expected
    if expected:
        assert lines[0].startswith(SUBSTITUTED + "solo_diet.core.lars.ForeachLARS")


def test_a_non_bool_setting_stops_before_any_data_is_read(data, tmp_path):
    from solo_diet.launch.common import compose_cfg

    argv = pretrain_argv(data, tmp_path, "diet_cf")[5:] + ["++performance.foreach_substitutes=on"]
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet_cf", argv)
    with pytest.raises(ConfigError, match="`performance.foreach_substitutes` must be True or"):
        run_pretrain(cfg)


def test_a_typo_of_the_key_gets_a_did_you_mean(data, tmp_path):
    from solo_diet.launch.common import compose_cfg

    argv = pretrain_argv(data, tmp_path, "diet_cf")[5:] + ["++performance.foreach_substitute=1"]
    with pytest.raises(ConfigError, match="did you mean `performance.foreach_substitutes`"):
        run_pretrain(compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet_cf", argv))
