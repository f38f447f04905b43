"""``solo-diet pretrain`` runs solo-learn's ``lars`` as ``ForeachLARS`` and says so in one line of
its log; ``performance.foreach_substitutes`` turns that off and takes only a bool."""

import pytest

from tests._solo import skip_without_solo

pytestmark = pytest.mark.solo
skip_without_solo()

from solo_diet.cli.main import main  # noqa: E402
from solo_diet.config import ConfigError  # noqa: E402
from solo_diet.launch.pretrain import run_pretrain  # noqa: E402
from tests.launch.test_gpu_path import SCRIPTS, pretrain_argv  # noqa: E402
from tests.launch.test_gpu_path import data as gpu_path_data  # noqa: E402

data = gpu_path_data  # the module's tiny ImageFolder fixture, shared

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
        assert lines[0].startswith(SUBSTITUTED + "solo_diet.lars.ForeachLARS")


def test_a_non_bool_setting_stops_before_any_data_is_read(data, tmp_path):
    from solo_diet.launch.common import compose_cfg

    argv = pretrain_argv(data, tmp_path, "diet_cf")[5:] + ["++performance.foreach_substitutes=on"]
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet_cf", argv)
    with pytest.raises(ConfigError, match="`performance.foreach_substitutes` must be True or"):
        run_pretrain(cfg)


def test_a_typo_of_the_key_gets_a_did_you_mean(data, tmp_path):
    from solo_diet.launch.common import compose_cfg

    argv = pretrain_argv(data, tmp_path, "diet_cf")[5:] + ["++performance.foreach_substitute=1"]
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet_cf", argv)
    with pytest.raises(ConfigError, match="did you mean `performance.foreach_substitutes`"):
        run_pretrain(cfg)
