"""Lightning callbacks of pretraining runs (docs/compare.md, "Building blocks"), progress lines, and
:class:`DivergenceGuard`, which stops a fit whose loss or weights turn NaN or infinite."""

from __future__ import annotations

import csv
import functools
import io
import itertools
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar

from solo_diet.core.atomic import atomic_write, write_text_atomic
from solo_diet.core.errors import ConfigError
from solo_diet.core.metrics import rankme


class EpochCostLogger(Callback):
    """One CSV row per epoch in ``csv_path`` (docs/compare.md), written whole; ``print_rows``: also
    printed. No GPU wait inside an epoch: a CUDA event after each batch is read at its end."""

    logged_metrics = ("val_loss", "val_acc1", "val_acc5", "val_rankme")  # columns after the costs

    def __init__(self, csv_path: str | Path, print_rows: bool = False):
        super().__init__()
        self.csv_path = Path(csv_path)
        self.print_rows = print_rows
        self._epoch_start = self._last_batch_end = 0.0
        self._start_event: Optional[torch.cuda.Event] = None
        self._end_event: Optional[torch.cuda.Event] = None
        self._samples = 0
        self._losses: list[torch.Tensor] = []
        self._validated = False

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:  # current_epoch is the first epoch to train, resumed or not
            drop_epoch_rows_after(self.csv_path, trainer.current_epoch - 1)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        device = trainer.strategy.root_device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            for event in events:
                event.record(torch.cuda.current_stream(device))
            self._start_event, self._end_event = events
        self._epoch_start = self._last_batch_end = time.perf_counter()
        self._samples, self._losses, self._validated = 0, [], False

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._validated = self._validated or not trainer.sanity_checking

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._end_event is not None:
            self._end_event.record(torch.cuda.current_stream(trainer.strategy.root_device))
        else:
            self._last_batch_end = time.perf_counter()
        targets = batch[-1] if isinstance(batch, (list, tuple)) else batch  # [indexes, views, y]
        if isinstance(targets, torch.Tensor):  # samples, not views
            self._samples += int(targets.shape[0]) * trainer.world_size
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        driver = getattr(pl_module, "step_graph", None)  # a replayed step returns None
        loss = driver.replayed_loss() if loss is None and driver is not None else loss
        if isinstance(loss, torch.Tensor):  # left on its device: no synchronisation
            self._losses.append(loss.detach())

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        cuda = self._start_event is not None
        if cuda:  # from the epoch's start to the end of its last batch, as the GPU ran it
            self._end_event.synchronize()
            train_seconds = self._start_event.elapsed_time(self._end_event) / 1000.0
        else:
            train_seconds = self._last_batch_end - self._epoch_start
        losses, device = self._losses, trainer.strategy.root_device
        row = {
            "epoch": trainer.current_epoch,
            "train_seconds": train_seconds,
            "epoch_seconds": time.perf_counter() - self._epoch_start,
            "samples": self._samples,
            "samples_per_s": self._samples / train_seconds if train_seconds > 0 else math.nan,
            "peak_gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else "",
            "train_loss": torch.stack(losses).double().mean().item() if losses else "",
        }
        for name in self.logged_metrics:
            value = trainer.callback_metrics.get(name) if self._validated else None
            row[name] = float(value) if value is not None else ""
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        before = self.csv_path.read_text() if self.csv_path.is_file() else ""
        line = io.StringIO()
        writer = csv.DictWriter(line, fieldnames=list(row))
        if not before:
            writer.writeheader()
        writer.writerow(row)
        write_text_atomic(self.csv_path, before + line.getvalue())  # whole rows or none
        if self.print_rows:
            print(_row_line(row, self.logged_metrics), flush=True)


def _row_line(row: dict[str, Any], metrics: Sequence[str]) -> str:
    """``epoch 12: 3.14 s training, 2542 samples/s, loss 4.2103, val_acc1 51.20``."""
    words = [
        f"epoch {row['epoch']}: {row['train_seconds']:.2f} s training",
        f"{row['samples_per_s']:.0f} samples/s",
    ]
    if row["train_loss"] != "":
        words.append(f"loss {row['train_loss']:.4f}")
    words += [f"{name} {row[name]:.4g}" for name in metrics if row.get(name, "") != ""]
    return ", ".join(words)


def read_epoch_rows(csv_path: str | Path) -> list[dict[str, float]]:
    """An ``EpochCostLogger`` CSV's rows, one per epoch (the last wins), empty cells NaN."""
    rows: dict[int, dict[str, float]] = {}
    with Path(csv_path).open(newline="") as f:
        for raw in csv.DictReader(f):
            row = {k: float(v) if v != "" else math.nan for k, v in raw.items()}
            rows[int(row["epoch"])] = row
    return [rows[epoch] for epoch in sorted(rows)]


def drop_epoch_rows_after(csv_path: str | Path, last_epoch: int) -> None:
    """Drop an ``EpochCostLogger`` CSV's rows after ``last_epoch`` (-1: the file)."""
    path = Path(csv_path)
    if not path.is_file():
        return
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        kept = [row for row in reader if int(float(row["epoch"])) <= last_epoch]
        columns = list(reader.fieldnames or [])
    if not kept:
        path.unlink()
        return
    with atomic_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(kept)


class RankMeMonitor(Callback):
    """Logs ``val_rankme`` (RankMe, Garrido et al., 2023) of the backbone features of the first
    ``max_samples`` val images every ``every_n_epochs`` epochs and the last, on their device."""

    def __init__(self, every_n_epochs: int = 1, max_samples: int = 2048):
        super().__init__()  # compare's spec checks both (rankme_every_n_epochs, rankme_samples)
        self.every_n_epochs = every_n_epochs
        self.max_samples = max_samples
        self._features: list[torch.Tensor] = []

    def _active(self, trainer: Trainer) -> bool:
        every = (trainer.current_epoch + 1) % self.every_n_epochs == 0
        return not trainer.sanity_checking and (every or _last_epoch(trainer))

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._features = []
        if not self._active(trainer):  # no stale value in epochs without RankMe
            trainer.callback_metrics.pop("val_rankme", None)

    @torch.no_grad()
    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        collected = sum(len(f) for f in self._features)
        if not self._active(trainer) or collected >= self.max_samples:
            return
        images = batch[0][: self.max_samples - collected]
        self._features.append(pl_module.backbone(images).float().flatten(1))  # no host wait

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._features:
            pl_module.log("val_rankme", rankme(torch.cat(self._features)), sync_dist=False)
        self._features = []


class FinalEpochCheckpoint(Callback):
    """Saves the last epoch through solo-learn's ``checkpointer`` (placed after it)."""

    def __init__(self, checkpointer: Any):
        super().__init__()
        self.checkpointer = checkpointer

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if _last_epoch(trainer) and trainer.current_epoch % self.checkpointer.frequency != 0:
            self.checkpointer.save(trainer)


def _last_epoch(trainer: Trainer) -> bool:
    return trainer.max_epochs is not None and trainer.current_epoch == trainer.max_epochs - 1


class TimedProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, redrawn at most every ``interval`` s and at each loop's last batch."""

    interval = 0.5
    _last_drawn = -math.inf  # the time of the last redraw

    def _should_update(self, current: int, total: Any) -> bool:
        if not self.is_enabled:
            return False
        now = time.monotonic()
        if current == total or now - self._last_drawn >= self.interval:
            self._last_drawn = now
            return True
        return False


def clock_text(seconds: float) -> str:
    """``1:05:09``, ``4:07``: hours only when there are some."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class OverallProgress:
    """A several-step command's progress line: step k of n, time elapsed and left (from each step's
    share of the work, ``weights``, or with ``from_epochs`` the training epochs measured)."""

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
        self.after_first: Optional[tuple[float, float]] = None  # (time, weight) once one is done

    def line(self, step: int, what: str, fraction: float = 0.0) -> str:
        """The line at ``fraction`` (0..1) of step ``step`` (1-based) doing ``what``."""
        done = sum(self.weights[: step - 1]) + fraction * self.weights[step - 1]
        return self._line(f"step {step} of {len(self.weights)}: {what}", done)

    def _line(self, head: str, done: float) -> str:
        """``head``, the time elapsed and the time left when ``done`` of the weight is done."""
        now = self.clock()
        elapsed = now - self.started
        done_here, to_do = done - self.skipped, sum(self.weights) - done
        if self.seconds_per_weight is not None:
            left = f"about {clock_text(self.seconds_per_weight * to_do)} left"
        elif self.from_epochs:
            left = "time left known after the first epoch"
        elif done_here > 0 and elapsed > 0:
            # the steps after the first set the rate: the first also paid the start-up
            since, then = self.after_first or (self.started, self.skipped)
            if done <= then:
                since, then = self.started, self.skipped
            left = f"about {clock_text((now - since) * to_do / (done - then))} left"
            self.after_first = self.after_first or (now, done)
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
        """A callback saying the line after each training epoch of step ``step`` and measuring the
        time per weight trained (its ``started``: whether the fit trained)."""
        progress, weight = self, self.weights[step - 1]

        class _EpochProgress(Callback):
            started, since, first, past_first = False, 0.0, 0.0, False

            def on_train_start(self, trainer, pl_module) -> None:
                self.started, self.since = True, progress.clock()
                self.first = _fraction(trainer, 0)
                progress.skipped += weight * self.first

            def on_train_epoch_end(self, trainer, pl_module) -> None:
                if not trainer.is_global_zero:
                    return
                now, done = progress.clock(), _fraction(trainer, 1)
                if done > self.first:
                    rate = (now - self.since) / ((done - self.first) * weight)
                    progress.seconds_per_weight = rate
                if not self.past_first:  # the first epoch also paid the fit's start-up: time
                    self.past_first, self.since, self.first = True, now, done  # the rest from here
                epoch = f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}"
                line = progress.line(step, f"{what}, {epoch}", done)
                progress.say(("\n" if trainer.progress_bar_callback is not None else "") + line)

        return _EpochProgress()


def _fraction(trainer: Any, ahead: int) -> float:
    """The share of a fit's epochs done, ``ahead`` epochs past ``trainer.current_epoch``."""
    return min(1.0, (trainer.current_epoch + ahead) / max(1, trainer.max_epochs))


class Diverged(ConfigError):
    """The loss or the weights of a fit became NaN or infinite."""


def non_finite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of the tensors of ``named`` holding a NaN or an infinity (one read-back)."""
    named = [(name, t) for name, t in named if t.is_floating_point()]
    if not named:
        return []
    device = named[0][1].device
    finite = torch.stack([torch.isfinite(t).all().to(device) for _, t in named]).tolist()
    return [name for (name, _), ok in zip(named, finite) if not ok]


class DivergenceGuard(Callback):
    """Stops a fit whose weights turn NaN or infinite, in one line; no host sync per step."""

    def __init__(self):
        super().__init__()
        self._finite = self._steps_finite = None  # on the loss's device
        self._first_step = self._steps = 0

    def on_train_batch_start(self, trainer: Trainer, *_: Any) -> None:
        if self._steps == 0:
            self._first_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            finite = torch.isfinite(loss.detach()).all()
            self._finite = finite if self._steps == 0 else self._finite & finite
            self._steps_finite = (0 if self._steps == 0 else self._steps_finite) + self._finite
            self._steps += 1
        if (batch_idx + 1) % max(1, trainer.log_every_n_steps) == 0:
            self._check(trainer, pl_module, weights=False)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._check(trainer, pl_module)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loss = trainer.callback_metrics.get("val_loss")  # finite weights can overflow the outputs
        finite = not isinstance(loss, torch.Tensor) or bool(torch.isfinite(loss).all())
        if not (trainer.sanity_checking or finite):
            what = f"the validation loss became NaN or infinite by step {trainer.global_step}"
            _fail(trainer, what)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check(trainer, pl_module)

    def _check(self, trainer: Trainer, pl_module: LightningModule, weights: bool = True) -> None:
        """A NaN loss alone is not divergence: solo-learn's DeepClusterV2 ignores every target in
        its first epoch (a mean over none); the weights are read when the loss was not finite."""
        finite_steps, steps = (int(self._steps_finite), self._steps) if self._steps else (0, 0)
        self._steps = 0
        loss_bad = not trainer.strategy.reduce_boolean_decision(finite_steps == steps, all=True)
        # the parameters and buffers (not the ``state_dict``, whose hooks may gather more)
        named = itertools.chain(pl_module.named_parameters(), pl_module.named_buffers())
        bad = non_finite_tensors(named) if (weights or loss_bad) else []
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            first = self._first_step + finite_steps
            where = f"at step {first}" if loss_bad else f"by step {trainer.global_step}"
            _fail(trainer, f"the weights `{bad[0]}`{more} became NaN or infinite {where}")


def _fail(trainer: Trainer, what: str) -> None:
    raise Diverged(
        f"the training diverged: {what} of epoch {trainer.current_epoch}; the likely cause is too "
        "large a learning rate: lower `optimizer.lr`. No checkpoint holds these weights."
    )
