"""``EpochCostLogger`` with plain Lightning on a CPU: one row per epoch, the mean of the losses
``training_step`` returned, the samples and the time split (no solo-learn needed)."""

from __future__ import annotations

from lightning.pytorch import Trainer

from solo_diet.launch.callbacks import EpochCostLogger, drop_epoch_rows_after, read_epoch_rows
from tests._helpers.lightning import KnownLosses, solo_batches


def test_one_row_per_epoch_with_the_mean_loss_and_the_samples(tmp_path):
    csv_path = tmp_path / "epochs.csv"
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=2,
        callbacks=[EpochCostLogger(csv_path)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(KnownLosses(), solo_batches(batches=2, size=3))

    rows = read_epoch_rows(csv_path)
    assert [r["epoch"] for r in rows] == [0.0, 1.0]
    assert [r["train_loss"] for r in rows] == [1.5, 5.5]
    assert all(r["samples"] == 6 for r in rows)
    for row in rows:
        assert 0 < row["train_seconds"] <= row["epoch_seconds"]
        assert abs(row["samples_per_s"] - 6 / row["train_seconds"]) < 1e-6 * row["samples_per_s"]


def test_rows_after_a_resumed_epoch_are_dropped_and_starting_over_drops_the_file(tmp_path):
    csv_path = tmp_path / "epochs.csv"
    csv_path.write_text(
        "epoch,train_seconds,my_metric\n0,1.0,10\n1,1.0,\n2,1.5,12\n1,2.0,\n3,1.0,13\n"
    )

    drop_epoch_rows_after(csv_path, 1)  # resumed from the epoch-1 checkpoint

    assert csv_path.read_text() == "epoch,train_seconds,my_metric\n0,1.0,10\n1,1.0,\n1,2.0,\n"
    assert [r["train_seconds"] for r in read_epoch_rows(csv_path)] == [1.0, 2.0]
    drop_epoch_rows_after(csv_path, -1)  # no checkpoint left: the run starts over
    assert not csv_path.exists()
    drop_epoch_rows_after(csv_path, 3)  # nothing logged yet: nothing to do
    assert not csv_path.exists()


class LogsAMetric(KnownLosses):
    """Also validates, logging ``my_metric`` (10 + epoch) in each validation epoch."""

    def validation_step(self, batch, batch_idx):
        self.log("my_metric", 10.0 + self.current_epoch)


def test_the_metrics_it_is_given_are_its_columns_and_its_printed_words(tmp_path, capsys):
    csv_path = tmp_path / "epochs.csv"
    costs = EpochCostLogger(csv_path, print_rows=True)
    costs.logged_metrics = ("my_metric",)
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=2,
        callbacks=[costs],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(LogsAMetric(), solo_batches(2, 3), solo_batches(1, 3))

    assert [r["my_metric"] for r in read_epoch_rows(csv_path)] == [10.0, 11.0]
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert [line.split(", ")[-1] for line in printed] == ["my_metric 10", "my_metric 11"]
