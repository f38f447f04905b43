"""``run_guarded``: how each kind of ending maps to an exit status and one line on stderr."""

from __future__ import annotations

import signal

import pytest

from solo_diet.core.errors import ConfigError
from solo_diet.launch.errors import Interrupted, UnreadableImage, run_guarded


def raising(error: BaseException):
    def command() -> int:
        raise error

    return command


def test_ctrl_c_outside_a_fit_exits_130(capsys):
    assert run_guarded("demo", raising(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == (
        "solo-diet demo: interrupted by SIGINT; nothing was saved; run the same command again to "
        "start over.\n"
    )


def test_the_checkpoint_hint_and_the_commands_own_advice(capsys):
    stop = Interrupted(signal.SIGTERM, resume="run the same command again to resume from a.ckpt.")
    assert run_guarded("pretrain", raising(stop)) == 143
    assert capsys.readouterr().err.endswith(
        "SIGTERM; run the same command again to resume from a.ckpt.\n"
    )
    assert run_guarded("compare", raising(stop), resume="rerun the comparison.") == 143
    assert (
        capsys.readouterr().err
        == "solo-diet compare: interrupted by SIGTERM; rerun the comparison.\n"
    )


def test_user_errors_are_one_line_and_bugs_keep_their_traceback(capsys):
    message = "Could not override 'x'.\nTo append to your config use +x=1"
    assert run_guarded("linear", raising(ConfigError(message))) == 2
    assert capsys.readouterr().err == (
        "solo-diet linear: Could not override 'x'. To append to your config use +x=1\n"
    )
    assert run_guarded("data", raising(FileNotFoundError("no such folder: d"))) == 2
    with pytest.raises(RuntimeError):
        run_guarded("pretrain", raising(RuntimeError("a bug")))
    with pytest.raises(AssertionError):
        run_guarded("pretrain", raising(AssertionError()))  # not raised by solo-learn: a bug


def test_an_unreadable_image_from_a_loader_worker_keeps_only_our_message():
    """torch re-creates a worker's exception from the worker's whole traceback text."""
    ours = (
        "cannot read image d/a.png (OSError: image file is truncated): replace or delete the file."
    )
    worker_text = (
        "Caught UnreadableImage in DataLoader worker process 0.\nOriginal Traceback (most recent "
        'call last):\n  File "x.py", line 1, in f\nOSError: image file is truncated\n\n'
        "The above exception was the direct cause of the following exception:\n\n"
        f"Traceback (most recent call last):\nsolo_diet.launch.errors.UnreadableImage: {ours}\n"
    )
    assert str(UnreadableImage(worker_text)) == ours
    assert str(UnreadableImage(ours)) == ours


def test_override_values_with_equals_signs_are_quoted():
    from solo_diet.launch.common import quote_equals

    assert quote_equals("pretrained_feature_extractor=r/x-ep=9.ckpt") == (
        "pretrained_feature_extractor='r/x-ep=9.ckpt'"
    )
    for unchanged in ("max_epochs=3", "k='a=b'", 'k="a=b"', "++k=v", "trainer=[a=1,b=2]", "k"):
        assert quote_equals(unchanged) == unchanged
