"""The overall progress line of a command of several steps (``demo``, ``compare``): step k of n,
time elapsed and the time left, from the time so far and each step's weight (its share of the
work), or with ``from_epochs`` from the measured training epochs only."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional, Sequence


def clock_text(seconds: float) -> str:
    """``1:05:09``, ``4:07``: hours only when there are some."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class OverallProgress:
    """Progress over steps of the given ``weights``; ``say`` prints each line."""

    def __init__(
        self,
        prefix: str,
        weights: Sequence[float],
        say: Callable[[str], None] = functools.partial(print, flush=True),
        clock: Callable[[], float] = time.monotonic,
        from_epochs: bool = False,
    ) -> None:
        self.prefix, self.weights, self.say, self.clock = prefix, list(weights), say, clock
        self.started = clock()
        self.skipped = 0.0  # weight done before this process started (a resumed fit's epochs)
        self.from_epochs = from_epochs
        self.seconds_per_weight: Optional[float] = None  # measured over training epochs

    def line(self, step: int, what: str, fraction: float = 0.0) -> str:
        """The line at ``fraction`` (0..1) of step ``step`` (1-based) doing ``what``."""
        done = sum(self.weights[: step - 1]) + fraction * self.weights[step - 1]
        return self._line(f"step {step} of {len(self.weights)}: {what}", done)

    def _line(self, head: str, done: float) -> str:
        """``head``, the time elapsed and the time left when ``done`` of the weight is done."""
        elapsed = self.clock() - self.started
        done_here, to_do = done - self.skipped, sum(self.weights) - done
        if self.seconds_per_weight is not None:
            left = f"about {clock_text(self.seconds_per_weight * to_do)} left"
        elif self.from_epochs:
            left = "time left known after the first epoch"
        elif done_here > 0 and elapsed > 0:
            left = f"about {clock_text(elapsed * to_do / done_here)} left"
        else:
            left = "time left known after the first step"
        return f"[{self.prefix}] {head}; {clock_text(elapsed)} elapsed, {left}"

    def step(self, step: int, what: str, fraction: float = 0.0) -> None:
        self.say(self.line(step, what, fraction))

    def ended(self, steps: Sequence[int], what: str) -> None:
        """Say the line once the steps ``steps`` (1-based, in any order) have ended."""
        done = sum(self.weights[s - 1] for s in steps)
        self.say(self._line(f"{len(steps)} of {len(self.weights)} {what}", done))

    def skip(self, step: int) -> None:
        """Step ``step`` had nothing to do (a finished fit rerun): its weight took no time here."""
        self.skipped += self.weights[step - 1]

    def epoch_callback(self, step: int, what: str) -> Any:
        """A Lightning callback that says the line after each training epoch of step ``step``
        (its ``started``: whether the fit trained at all), on a line of its own (not after a
        progress bar's), and measures the time per weight unit of the epochs trained."""
        from lightning.pytorch import Callback

        progress, weight = self, self.weights[step - 1]

        class _EpochProgress(Callback):
            started, since, first = False, 0.0, 0.0

            def on_train_start(self, trainer, pl_module) -> None:
                self.started, self.since = True, progress.clock()
                self.first = _fraction(trainer, 0)
                progress.skipped += weight * self.first

            def on_train_epoch_end(self, trainer, pl_module) -> None:
                if not trainer.is_global_zero:
                    return
                trained = (_fraction(trainer, 1) - self.first) * weight
                if trained > 0:
                    progress.seconds_per_weight = (progress.clock() - self.since) / trained
                epoch = f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}"
                line = progress.line(step, f"{what}, {epoch}", _fraction(trainer, 1))
                progress.say(("\n" if trainer.progress_bar_callback is not None else "") + line)

        return _EpochProgress()


def _fraction(trainer: Any, ahead: int) -> float:
    """The share of a fit's epochs done, ``ahead`` epochs past ``trainer.current_epoch``."""
    return min(1.0, (trainer.current_epoch + ahead) / max(1, trainer.max_epochs))
