import numpy as np
import pytest
import torch
import torch.nn.functional as F

from solo_diet.core.labels import (
    LABEL_DEFAULTS,
    LabelSource,
    batch_rows,
    label_source_from_kwargs,
    load_groups,
)
from solo_diet.core.losses import sdiet_batch_cross_entropy

INDEXES = torch.tensor([0, 5, 3, 9, 7])
TARGETS = torch.tensor([2, -1, 0, 2, 1])


def kwargs(**overrides):
    return {**LABEL_DEFAULTS, "num_samples": 10, **overrides}


def test_index_source_is_the_datum_index():
    source = LabelSource("index", num_samples=10)
    assert source.num_rows == 10
    assert source(INDEXES, TARGETS).tolist() == INDEXES.tolist()


def test_class_source_is_the_target_and_keeps_unlabelled():
    source = LabelSource("class", num_samples=10, num_classes=3)
    assert source.num_rows == 3
    assert source(INDEXES, TARGETS).tolist() == [2, -1, 0, 2, 1]
    assert source.has_unlabelled


def test_mix_source_uses_class_where_known_else_offset_index():
    source = LabelSource("mix", num_samples=10, num_classes=3)
    assert source.num_rows == 13
    assert source(INDEXES, TARGETS).tolist() == [2, 3 + 5, 0, 2, 1]
    assert not source.has_unlabelled


def test_groups_source_renumbers_distinct_groups():
    groups = torch.tensor([40, 7, 7, 40, 12, 7, 12, 99, 40, 12])
    source = LabelSource("groups", num_samples=10, groups=groups)
    assert source.num_rows == 4  # one row per distinct id: 7 -> 0, 12 -> 1, 40 -> 2, 99 -> 3
    assert source(INDEXES, TARGETS).tolist() == [2, 0, 2, 1, 3]


def test_labelled_fraction_hides_a_fixed_seeded_subset():
    everything = torch.arange(100)
    targets = everything % 4
    source = LabelSource(
        "class", num_samples=100, num_classes=4, labelled_fraction=0.1, label_seed=3
    )
    ids = source(everything, targets)
    assert int((ids >= 0).sum()) == 10
    assert torch.equal(ids[ids >= 0], targets[ids >= 0])
    again = LabelSource(
        "class", num_samples=100, num_classes=4, labelled_fraction=0.1, label_seed=3
    )
    other = LabelSource(
        "class", num_samples=100, num_classes=4, labelled_fraction=0.1, label_seed=4
    )
    assert torch.equal(again(everything, targets), ids)
    assert not torch.equal(other(everything, targets), ids)
    mix = LabelSource("mix", num_samples=100, num_classes=4, labelled_fraction=0.1, label_seed=3)(
        everything, targets
    )
    assert torch.equal(mix[ids >= 0], ids[ids >= 0])
    assert torch.equal(mix[ids < 0], 4 + everything[ids < 0])


def test_buffers_follow_the_module_and_stay_out_of_the_state_dict():
    source = LabelSource("groups", num_samples=10, groups=torch.arange(10) // 2)
    assert source.state_dict() == {}
    assert source.to(torch.float64).group_rows.dtype == torch.long


@pytest.mark.parametrize(
    "source, indexes, targets, match",
    [
        ("index", torch.tensor([0, 10]), TARGETS[:2], "dataset index 10 .*num_samples"),
        ("index", torch.tensor([-1, 2]), TARGETS[:2], "dataset index -1"),
        ("class", INDEXES[:2], torch.tensor([3, 0]), "target 3 .*argument `num_classes`"),
        ("mix", INDEXES[:2], torch.tensor([-2, 0]), "target -2"),
    ],
)
def test_out_of_range_ids_are_refused(source, indexes, targets, match):
    with pytest.raises(IndexError, match=match):
        LabelSource(source, num_samples=10, num_classes=3)(indexes, targets)


@pytest.mark.parametrize(
    "overrides, num_classes, has_labels, match",
    [
        ({"labels": "nope"}, 3, True, "^argument `source` must be one of"),
        ({"labels": "class"}, 3, False, "argument `has_labels`"),
        ({"labels": "mix"}, 3, False, "argument `has_labels`"),
        ({"labels": "class"}, None, True, "argument `num_classes` >= 1"),
        ({"labels": "groups"}, 3, True, "needs argument `groups`"),
        ({"labels": "index", "groups_path": "g.npy"}, 3, True, "only read with `labels=groups`"),
        ({"labels": "index", "labelled_fraction": 0.5}, 3, True, "labelled_fraction"),
        ({"labels": "class", "labelled_fraction": 0.0}, 3, True, "labelled_fraction"),
    ],
)
def test_bad_configs_are_refused(overrides, num_classes, has_labels, match):
    with pytest.raises(ValueError, match=match):
        label_source_from_kwargs(kwargs(**overrides), num_classes, has_labels)


def test_groups_file_round_trip_and_checks(tmp_path):
    groups = np.array([3, 3, 1, 0, 1, 2, 2, 0, 5, 5])
    for suffix, save in [
        (".npy", lambda p: np.save(p, groups)),
        (".pt", lambda p: torch.save(torch.from_numpy(groups), p)),
        (".txt", lambda p: np.savetxt(p, groups, fmt="%d")),
    ]:
        path = tmp_path / f"groups{suffix}"
        save(path)
        assert load_groups(path).tolist() == groups.tolist()
        source = label_source_from_kwargs(kwargs(labels="groups", groups_path=str(path)), None)
        assert source.num_rows == 5
    np.save(tmp_path / "short.npy", groups[:4])
    with pytest.raises(ValueError, match="4 entries .* 10 samples"):
        label_source_from_kwargs(
            kwargs(labels="groups", groups_path=str(tmp_path / "short.npy")), None
        )
    np.save(tmp_path / "negative.npy", groups - 1)
    with pytest.raises(ValueError, match=">= 0"):
        label_source_from_kwargs(
            kwargs(labels="groups", groups_path=str(tmp_path / "negative.npy")), None
        )
    np.save(tmp_path / "float.npy", groups.astype(float))
    with pytest.raises(ValueError, match="integer"):
        label_source_from_kwargs(
            kwargs(labels="groups", groups_path=str(tmp_path / "float.npy")), None
        )
    with pytest.raises(ValueError, match="not a file"):
        load_groups(tmp_path / "missing.npy")


def test_batch_rows_are_the_distinct_labelled_ids():
    rows, positions = batch_rows(torch.tensor([7, 2, -1, 7, 4, 2]))
    assert rows.tolist() == [2, 4, 7]
    assert positions.tolist() == [2, 0, -1, 2, 1, 0]


def multi_positive_target(
    positions: torch.Tensor, num_rows: int, label_smoothing: float = 0.0
) -> torch.Tensor:
    """``(B, M)`` batch cross-entropy target over the batch's distinct rows (s-DIET paper, Eq.
    7): row ``j`` is ``(1 - eps) e_{positions[j]} + eps / M``, a zero row for an unlabelled datum
    (``positions = -1``); with all ids distinct (``index``), s-DIET's smoothed identity target.
    """
    labelled = positions >= 0
    target = F.one_hot(positions.clamp_min(0), num_rows).to(torch.float32)
    target = (1.0 - label_smoothing) * target + label_smoothing / num_rows
    return target * labelled.unsqueeze(1)


def test_multi_positive_target_is_pytorch_smoothed_cross_entropy():
    generator = torch.Generator().manual_seed(0)
    ids = torch.tensor([7, 2, -1, 7, 4, 2])
    rows, positions = batch_rows(ids)
    logits = torch.randn(6, rows.numel(), generator=generator)
    target = multi_positive_target(positions, rows.numel(), label_smoothing=0.3)
    assert target[2].abs().sum() == 0  # unlabelled: no target
    assert (
        target[[0, 3], 2].tolist() == [pytest.approx(0.7 + 0.1)] * 2
    )  # row 7 is the positive of two data
    labelled = positions >= 0
    per_sample = -(target * logits.log_softmax(dim=1)).sum(dim=1)
    expected = F.cross_entropy(logits[labelled], positions[labelled], label_smoothing=0.3)
    torch.testing.assert_close(per_sample[labelled].mean(), expected)


def test_index_source_target_is_sdiet_batch_cross_entropy():
    generator = torch.Generator().manual_seed(1)
    indexes = torch.tensor([8, 1, 5, 3])
    ids = LabelSource("index", num_samples=10)(indexes, torch.full((4,), -1))
    rows, positions = batch_rows(ids)
    head = torch.randn(10, 6, generator=generator)
    z = torch.randn(4, 6, generator=generator)
    logits = F.normalize(z, dim=1) @ head[rows].T
    target = multi_positive_target(positions, rows.numel(), label_smoothing=0.8)
    ours = -(target * logits.log_softmax(dim=1)).sum(dim=1).mean()
    # sdiet's batch order: sample k is scored against the rows of the batch in batch order
    torch.testing.assert_close(
        ours, sdiet_batch_cross_entropy(z, head[indexes], label_smoothing=0.8)
    )


def test_device_assert_messages_fit_cuda_limit():
    """CUDA's asynchronous assert refuses messages of 255 characters or more (a RuntimeError at the
    first step of every run on a GPU): the checks' device messages stay under it."""
    from solo_diet.core.labels import device_range_message

    largest = 2**63 - 1
    for what, low, key in (
        ("dataset index", 0, "method_kwargs.num_samples"),
        ("target", -1, "data.num_classes"),
    ):
        assert len(device_range_message(what, low, largest, key)) < 255


def test_a_device_index_check_names_the_key_to_fix(monkeypatch):
    """On a GPU the out-of-range check is an asynchronous device assert, whose message is all a
    user sees: it names `method_kwargs.num_samples` and the launcher that sets it."""
    from solo_diet.methods.index_method import check_sample_indexes

    messages: list[str] = []
    monkeypatch.setattr(torch, "_assert_async", lambda _ok, message: messages.append(message))
    check_sample_indexes(torch.tensor([0, 7], device="meta"), num_samples=5)
    assert len(messages) == 1 and len(messages[0]) < 255
    assert "method_kwargs.num_samples" in messages[0] and "solo-diet pretrain" in messages[0]
