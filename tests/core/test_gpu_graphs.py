"""GPUBatchLoader's augmentation generator and CUDA-graph replays (CapturedAugmentation).

The CPU tests check the generator rule (one generator per loader and device, reseeded from
``(seed, epoch, rank)`` each epoch) and the ``cuda_graphs`` switch; the CUDA tests (skipped without
a GPU) check that graph replays draw what the eager pipeline draws."""

import pytest
import torch

from solo_diet.core.data.loader import GPUBatchLoader, OrderedBatchSampler, derive_seed
from solo_diet.core.data.pipeline import (
    CapturedAugmentation,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
from solo_diet.core.data.tensor_data import ImageTensors
from solo_diet.core.sdiet.samplers import SuperBatchSampler

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def synthetic(num: int, size: int = 32) -> ImageTensors:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (num, 3, size, size), dtype=torch.uint8, generator=generator)
    return ImageTensors(images, torch.arange(num) % 5)


class GeneratorRecorder:
    """Two views whose randomness comes only from the generator; keeps the generator and its
    state at each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Generator, torch.Tensor]] = []

    def __call__(self, rows: torch.Tensor, generator: torch.Generator) -> list:
        self.calls.append((generator, generator.get_state()))
        x = rows.float()
        return [x + torch.rand(x.shape, generator=generator, device=x.device), x]


def every_op_pipeline() -> MultiCropAugmentation:
    """Two 32 px views and one 16 px view (two view groups), every op on."""
    common = {
        "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
        "color_jitter": {"prob": 0.8, "brightness": 0.4, "contrast": 0.4, "saturation": 0.2,
                         "hue": 0.1},
        "grayscale": {"prob": 0.2},
        "gaussian_blur": {"prob": 0.5},
        "solarization": {"prob": 0.2},
        "equalization": {"prob": 0.2},
        "horizontal_flip": {"prob": 0.5},
        "random_erasing": {"prob": 0.3},
    }  # fmt: skip
    nodes = [
        {**common, "crop_size": 32, "num_crops": 2},
        {**common, "crop_size": 16, "num_crops": 1},
    ]
    return MultiCropAugmentation.from_config(nodes, "cifar10")


def flat(batches: list) -> list[torch.Tensor]:
    """Every tensor of a loader's batches (indices, views or images, targets), in order."""
    out = []
    for batch in batches:
        for part in batch:
            out.extend(part if isinstance(part, list) else [part])
    return out


def epoch(loader: GPUBatchLoader, number: int) -> list[torch.Tensor]:
    loader.set_epoch(number)
    return flat(list(loader))


def assert_equal(a: list, b: list) -> None:
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def assert_graph_matches_eager(graph: list, eager: list) -> None:
    """Same draws, hence the same views; a tolerance of 1e-5 for kernels (cuBLAS) that may differ
    under capture: views drawn with other parameters differ by O(1)."""
    assert len(graph) == len(eager)
    for x, y in zip(graph, eager):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- CPU


def test_one_generator_per_loader_reseeded_from_seed_epoch_and_rank_each_epoch():
    recorder = GeneratorRecorder()
    sampler = SuperBatchSampler(40, 4, seed=2, num_replicas=2, rank=1)
    loader = GPUBatchLoader.for_pretraining(
        synthetic(40, 4), 4, recorder, seed=2, batch_sampler=sampler, device="cpu"
    )
    transform, generator = loader.augmenter(torch.device("cpu"))
    assert transform is recorder  # no CUDA graphs on the CPU
    states = {}
    for number in (0, 1, 0):
        recorder.calls.clear()
        epoch(loader, number)
        assert len(recorder.calls) == len(loader) == 5
        assert all(g is generator for g, _ in recorder.calls)
        expected = torch.Generator().manual_seed(derive_seed(2, number, 1)).get_state()
        assert torch.equal(recorder.calls[0][1], expected)
        assert not torch.equal(recorder.calls[1][1], expected)  # it advances within the epoch
        states.setdefault(number, [s for _, s in recorder.calls])
        assert_equal(states[number], [s for _, s in recorder.calls])


def test_cuda_graphs_must_be_true_or_false():
    for value in ("yes", 1, None):
        with pytest.raises(ValueError, match="argument `cuda_graphs` must be True or False"):
            GPUBatchLoader.for_pretraining(
                synthetic(8, 4), 4, GeneratorRecorder(), cuda_graphs=value, device="cpu"
            )
    eager = GPUBatchLoader.for_pretraining(
        synthetic(8, 4), 4, GeneratorRecorder(), cuda_graphs=False, device="cpu"
    )
    assert eager.cuda_graphs is False and eager.augmenter(torch.device("cpu"))[0] is eager.transform


# ---------------------------------------------------------------- CUDA (skipped without a GPU)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_captured_views_equal_eager_views_for_the_same_seed():
    """Also when a second shape is captured mid-stream: capturing does not move the generator."""
    pipeline = every_op_pipeline()
    source = torch.Generator(device="cuda").manual_seed(0)
    big = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, device="cuda", generator=source)
    small = big[:24].clone()
    order = [big, big, small, big, small]
    eager_generator = torch.Generator(device="cuda").manual_seed(11)
    eager = [view for images in order for view in pipeline(images, eager_generator)]
    captured = CapturedAugmentation(pipeline, torch.Generator(device="cuda").manual_seed(11))
    graph = [view for images in order for view in captured(images)]
    assert len(captured._graphs) == 2
    assert_graph_matches_eager(graph, eager)
    assert not torch.equal(graph[0], graph[3])  # the second batch drew new parameters


@needs_cuda
def test_cuda_replays_after_a_reseed_repeat_and_other_seeds_draw_other_views():
    generator = torch.Generator(device="cuda")
    captured = CapturedAugmentation(every_op_pipeline(), generator)
    images = torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8, device="cuda")

    def replays(seed: int) -> list:
        generator.manual_seed(seed)
        return [view for _ in range(3) for view in captured(images)]

    first, again, other = replays(5), replays(5), replays(6)
    assert_equal(first, again)
    assert not torch.equal(first[0], first[3]) and not torch.equal(first[0], other[0])


@needs_cuda
@pytest.mark.parametrize("storage", ["device", "pinned"])
def test_cuda_loader_graphs_match_eager_and_a_resumed_epoch_equals_the_uninterrupted_one(storage):
    data, pipeline = synthetic(300), every_op_pipeline()

    def loader(cuda_graphs: bool) -> GPUBatchLoader:
        return GPUBatchLoader.for_pretraining(
            data, 64, pipeline, seed=3, storage=storage, device="cuda", cuda_graphs=cuda_graphs
        )

    graphed, eager = loader(True), loader(False)
    uninterrupted = [epoch(graphed, 0), epoch(graphed, 1)]
    assert_graph_matches_eager(uninterrupted[0], epoch(eager, 0))
    assert_graph_matches_eager(uninterrupted[1], epoch(eager, 1))
    assert_equal(uninterrupted[0], epoch(graphed, 0))  # an epoch again: the same draws
    assert_equal(uninterrupted[1], epoch(loader(True), 1))  # resumed at epoch 1
    device = torch.device("cuda", torch.cuda.current_device())
    assert len(graphed.augmenter(device)[0]._graphs) == 1  # drop_last: one batch shape


@needs_cuda
def test_cuda_ordered_loader_with_a_short_last_batch_under_and_outside_inference_mode():
    data = synthetic(23)
    transform = ProbeTrainTransform(24, CIFAR_MEAN, CIFAR_STD)

    def loader(cuda_graphs: bool) -> GPUBatchLoader:
        sampler = OrderedBatchSampler(len(data), 5)
        return GPUBatchLoader(
            data, transform, sampler, pretraining=False, device="cuda", cuda_graphs=cuda_graphs
        )

    graphed, eager = loader(True), loader(False)
    with torch.inference_mode():  # as Lightning validates
        validated = flat(list(graphed))
    outside = flat(list(graphed))
    reference = flat(list(eager))
    assert_graph_matches_eager(validated, reference)
    assert_graph_matches_eager(outside, reference)
    assert validated[-2].shape == (3, 3, 24, 24)
    device = torch.device("cuda", torch.cuda.current_device())
    assert len(graphed.augmenter(device)[0]._graphs) == 4  # 2 shapes x (inference mode or not)
