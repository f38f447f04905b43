"""GPU data path core (torch only): decoded datasets and GPUBatchLoader, run on CPU tensors."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from solo_diet.core.data import loader as loader_module
from solo_diet.core.data.loader import GPUBatchLoader, OrderedBatchSampler, derive_seed
from solo_diet.core.data.tensor_data import ImageTensors, check_host_memory, load_images
from solo_diet.core.errors import ConfigError
from solo_diet.core.sdiet.samplers import SuperBatchSampler

CLASSES, PER_CLASS, SIZE = 3, 7, 8


def write_folder(
    root: Path, classes: int = CLASSES, per_class: int = PER_CLASS, size=(SIZE, SIZE), seed: int = 0
) -> Path:
    """Class folders of random PNGs; pixel (0, 0) of image i of class c encodes (c, i)."""
    rng = np.random.default_rng(seed)
    for label in range(classes):
        (root / f"class_{label}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
            pixels[0, 0] = (label, i, 7)
            Image.fromarray(pixels).save(root / f"class_{label}" / f"{i:03d}.png")
    return root


def pil_tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("folder"))


def synthetic(num: int = 40, size: int = 4) -> ImageTensors:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (num, 3, size, size), dtype=torch.uint8, generator=generator)
    return ImageTensors(images, torch.arange(num) % 5)


def noisy_views(rows: torch.Tensor, generator: torch.Generator) -> list:
    """Two 'views' whose randomness comes only from ``generator``."""
    x = rows.float()
    return [x + torch.rand(x.shape, generator=generator, device=x.device), x.flip(-1)]


def epoch_batches(loader: GPUBatchLoader, epoch: int) -> list:
    loader.set_epoch(epoch)
    return list(loader)


def assert_same_batches(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (idx_a, views_a, t_a), (idx_b, views_b, t_b) in zip(a, b):
        assert torch.equal(idx_a, idx_b) and torch.equal(t_a, t_b)
        assert all(torch.equal(u, v) for u, v in zip(views_a, views_b))


# ---------------------------------------------------------------- decoded datasets


def test_image_folder_rows_are_torchvision_image_folder_samples(folder):
    data = load_images("custom", folder, "pretrain", threads=3)
    reference = ImageFolder(str(folder))
    assert len(data) == len(reference) == CLASSES * PER_CLASS
    assert (
        data.images.shape == (CLASSES * PER_CLASS, 3, SIZE, SIZE)
        and data.images.dtype == torch.uint8
    )
    for i, (path, target) in enumerate(reference.samples):
        assert data.targets[i].item() == target
        assert torch.equal(data.images[i], pil_tensor(Image.open(path)))


def test_unlabelled_folder_follows_listdir_with_target_minus_one(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(5):
        Image.fromarray(np.full((SIZE, SIZE, 3), 10 * i, dtype=np.uint8)).save(
            root / f"{(7 * i) % 5}.png"
        )
    data = load_images("custom", root, "pretrain", no_labels=True)
    names = os.listdir(root)
    assert torch.equal(data.targets, torch.full((5,), -1))
    for i, name in enumerate(names):
        assert torch.equal(data.images[i], pil_tensor(Image.open(root / name)))
    # the validation split is always an ImageFolder: no_labels does not apply to it
    with pytest.raises(ConfigError, match="ImageFolder"):
        load_images("custom", root, "val", no_labels=True)


def test_fraction_keeps_solo_learns_samples_in_its_order(folder):
    sklearn = pytest.importorskip("sklearn.model_selection")
    samples = ImageFolder(str(folder)).samples
    files, labels = [f for f, _ in samples], [t for _, t in samples]
    kept_files, _, kept_labels, _ = sklearn.train_test_split(
        files, labels, train_size=0.5, stratify=labels, random_state=42
    )
    data = load_images("custom", folder, "pretrain", fraction=0.5)
    assert data.targets.tolist() == kept_labels
    for i, path in enumerate(kept_files):
        assert torch.equal(data.images[i], pil_tensor(Image.open(path)))
    assert len(load_images("custom", folder, "train", fraction=-1)) == CLASSES * PER_CLASS
    with pytest.raises(ValueError, match="^argument `fraction` must be in"):
        load_images("custom", folder, "pretrain", fraction=1.0)


def test_mixed_sizes_need_image_size_then_resize_shorter_side_and_center_crop(tmp_path):
    root = tmp_path / "mixed"
    write_folder(root / "a", classes=1, per_class=2, size=(12, 8))
    write_folder(root / "b", classes=1, per_class=2, size=(8, 8), seed=1)
    with pytest.raises(ConfigError, match="Set argument `image_size`"):
        load_images("custom", root, "train")
    data = load_images("custom", root / "a", "train")  # one non-square size is kept as it is
    assert data.images.shape[2:] == (8, 12)
    both = tmp_path / "both"
    write_folder(both, classes=1, per_class=1, size=(12, 8))
    Image.new("RGB", (6, 9), (1, 2, 3)).save(both / "class_0" / "z.png")
    with pytest.raises(ConfigError, match=r"is 6x9 px but .* is 12x8 px"):
        load_images("custom", both, "train")
    data = load_images("custom", both, "train", image_size=6)
    assert data.images.shape == (2, 3, 6, 6)
    for i, path in enumerate(sorted((both / "class_0").iterdir())):
        resized = TF.resize(
            Image.open(path).convert("RGB"), 6, interpolation=InterpolationMode.BICUBIC
        )
        assert torch.equal(data.images[i], pil_tensor(TF.center_crop(resized, [6, 6])))


def test_unreadable_or_truncated_image_is_a_config_error_naming_it(tmp_path):
    root = write_folder(tmp_path / "bad", classes=2, per_class=2)
    truncated = root / "class_1" / "001.png"
    truncated.write_bytes(truncated.read_bytes()[:60])
    with pytest.raises(ConfigError, match=str(truncated)):
        load_images("custom", root, "train")
    (root / "class_1" / "001.png").write_bytes(b"not an image")
    with pytest.raises(ConfigError, match="001.png"):
        load_images("custom", root, "train")


def test_missing_torchvision_files_and_unsupported_keys_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="never downloads"):
        load_images("cifar10", tmp_path, "pretrain")
    with pytest.raises(ValueError, match="^argument `fraction` selects part of an ImageFolder"):
        load_images("cifar100", tmp_path, "pretrain", fraction=0.5)
    with pytest.raises(ValueError, match="^argument `dataset: mnist` has no GPU data path"):
        load_images("mnist", tmp_path, "pretrain")
    with pytest.raises(ValueError, match="^argument `image_size` must be a positive integer"):
        load_images("custom", tmp_path, "pretrain", image_size=0)
    with pytest.raises(ValueError, match="^argument `root` must be the path of the val set"):
        load_images("custom", None, "val")


def test_host_memory_check_names_both_sizes():
    with pytest.raises(
        ConfigError, match=r"needs 1073741824\.00 GiB of host memory but .* GiB are available"
    ):
        check_host_memory(2**60, "decoding everything", "Use less.")


# ---------------------------------------------------------------- loader


def test_pretraining_batches_have_solo_learns_structure_and_true_indices():
    data = synthetic(num=42)
    loader = GPUBatchLoader.for_pretraining(data, 8, noisy_views, seed=3, device="cpu")
    assert len(loader) == 42 // 8 and loader.dataset is data
    batches = epoch_batches(loader, 0)
    assert len(batches) == 5
    seen = []
    for indexes, views, targets in batches:
        assert indexes.dtype == torch.int64 and indexes.shape == (8,)
        assert isinstance(views, list) and len(views) == 2
        assert torch.equal(views[1], data.images[indexes].float().flip(-1))
        assert torch.equal(targets, data.targets[indexes])
        noise = views[0] - data.images[indexes].float()
        assert noise.min() >= 0 and noise.max() < 1
        seen += indexes.tolist()
    assert len(set(seen)) == 40  # a permutation, the incomplete last batch dropped
    order = SuperBatchSampler(42, 8, seed=3).global_batches().flatten().tolist()
    assert seen == order


def test_epochs_reshuffle_and_reseed_and_a_resumed_run_draws_the_same():
    data = synthetic()
    loader = GPUBatchLoader.for_pretraining(data, 8, noisy_views, seed=1, device="cpu")
    first, second = epoch_batches(loader, 0), epoch_batches(loader, 1)
    assert not torch.equal(first[0][0], second[0][0])
    again = epoch_batches(loader, 0)
    assert_same_batches(first, again)  # the same epoch twice: same order, same augmentations
    resumed = GPUBatchLoader.for_pretraining(data, 8, noisy_views, seed=1, device="cpu")
    assert_same_batches(second, epoch_batches(resumed, 1))
    other_seed = GPUBatchLoader.for_pretraining(data, 8, noisy_views, seed=2, device="cpu")
    assert not torch.equal(epoch_batches(other_seed, 1)[0][0], second[0][0])
    assert loader.sampler is loader.batch_sampler.sampler and loader.sampler.epoch == 0


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ddp_split_is_disjoint_and_covering(world):
    data, batch = synthetic(num=50), 4
    reference = SuperBatchSampler(50, batch, seed=5, num_replicas=world, rank=0)
    reference.set_epoch(2)
    global_order = reference.global_batches()
    per_rank, noise = [], []
    for rank in range(world):
        sampler = SuperBatchSampler(50, batch, seed=5, num_replicas=world, rank=rank)
        loader = GPUBatchLoader.for_pretraining(
            data, batch, noisy_views, seed=5, batch_sampler=sampler, device="cpu"
        )
        batches = epoch_batches(loader, 2)
        assert len(batches) == 50 // (batch * world)
        per_rank.append(torch.stack([b[0] for b in batches]))
        noise.append(batches[0][1][0] - data.images[batches[0][0]].float())
    steps = per_rank[0].shape[0]
    assert steps == len(global_order)
    for step in range(steps):  # the ranks' batches, rank 0 first, are the global batch
        assert torch.equal(torch.cat([r[step] for r in per_rank]), global_order[step])
    everything = torch.cat([r.flatten() for r in per_rank])
    assert everything.unique().numel() == everything.numel() == steps * batch * world
    for a in range(world):  # each rank draws its own augmentations
        for b in range(a + 1, world):
            assert not torch.equal(noise[a], noise[b])


def test_pinned_storage_gives_the_device_storage_batches():
    data = synthetic(num=37)
    device = GPUBatchLoader.for_pretraining(
        data, 6, noisy_views, seed=4, storage="device", device="cpu"
    )
    pinned = GPUBatchLoader.for_pretraining(
        data, 6, noisy_views, seed=4, storage="pinned", device="cpu"
    )
    for epoch in (0, 1):
        assert_same_batches(epoch_batches(device, epoch), epoch_batches(pinned, epoch))
    assert pinned.resident()[1] == "pinned" and device.resident()[1] == "device"
    # the staging buffers are reused: a batch kept by the consumer is not overwritten later
    kept = list(pinned)
    for indexes, views, _ in kept:
        assert torch.equal(views[1], data.images[indexes].float().flip(-1))


def test_method_batch_sampler_is_iterated_and_exposed():
    data = synthetic(num=48)
    sampler = SuperBatchSampler(48, 4, rows_per_step=3, seed=9)
    loader = GPUBatchLoader.for_pretraining(
        data, 4, noisy_views, seed=9, batch_sampler=sampler, device="cpu"
    )
    assert loader.batch_sampler is sampler and loader.sampler is sampler.sampler
    loader.set_epoch(3)
    assert sampler.epoch == 3
    assert [b[0].tolist() for b in loader] == list(sampler)


@pytest.mark.parametrize("storage", ["device", "pinned"])
def test_ordered_classification_batches_cover_the_set_once(storage):
    data = synthetic(num=23)
    loader = GPUBatchLoader.for_classification(
        data, 5, lambda rows, g: rows.float() / 255, shuffle=False, storage=storage, device="cpu"
    )
    batches = list(loader)
    assert len(loader) == len(batches) == 5 and batches[-1][0].shape[0] == 3
    torch.testing.assert_close(
        torch.cat([x for x, _ in batches]), data.images.float() / 255, rtol=0, atol=0
    )
    assert torch.equal(torch.cat([t for _, t in batches]), data.targets)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ordered_sampler_rank_shares_are_contiguous_disjoint_and_covering(world, monkeypatch):
    shares = []
    for rank in range(world):  # each rank reads its place in the group at iteration time
        monkeypatch.setattr(loader_module, "world_and_rank", lambda: (world, rank))
        sampler = OrderedBatchSampler(23, 4, split_ranks=True)
        shares.append((list(sampler), len(sampler), len(sampler.share())))
    flat = [i for batches, _, _ in shares for batch in batches for i in batch]
    assert flat == list(range(23))
    assert all(length == -(-size // 4) for _, length, size in shares)


def test_shuffled_classification_drops_the_incomplete_batch():
    data = synthetic(num=23)
    loader = GPUBatchLoader.for_classification(
        data, 5, lambda rows, g: rows.float(), shuffle=True, seed=0, device="cpu"
    )
    batches = epoch_batches(loader, 0)
    assert len(batches) == 4 and all(x.shape[0] == 5 for x, _ in batches)
    assert torch.cat([t for _, t in batches]).shape == (20,)


def test_loader_errors():
    with pytest.raises(ValueError, match="argument `storage` must be one of"):
        GPUBatchLoader.for_pretraining(synthetic(), 4, noisy_views, storage="gpu", device="cpu")
    with pytest.raises(ValueError, match="smaller than one global batch"):
        GPUBatchLoader.for_pretraining(synthetic(num=3), 4, noisy_views, device="cpu")
    with pytest.raises(ValueError, match="uint8"):
        ImageTensors(torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.int64))


def test_derived_seeds_differ_per_part_and_are_stable():
    seeds = {derive_seed(s, e, r) for s in range(3) for e in range(3) for r in range(3)}
    assert len(seeds) == 27
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3) < 2**63


# ---------------------------------------------------------------- CUDA (skipped without a GPU)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_cuda_pinned_storage_gives_the_device_storage_batches_on_the_device():
    data = synthetic(num=300, size=16)
    device, pinned, auto = (
        GPUBatchLoader.for_pretraining(data, 32, noisy_views, seed=4, storage=s, device="cuda")
        for s in ("device", "pinned", "auto")
    )
    for epoch in (0, 1, 0):
        assert_same_batches(epoch_batches(device, epoch), epoch_batches(pinned, epoch))
    indexes, views, targets = next(iter(pinned))
    assert indexes.is_cuda and targets.is_cuda and all(v.is_cuda for v in views)
    assert pinned.resident()[2].host.is_pinned() and auto.resident()[1] == "device"
    assert device.resident()[2].is_cuda


@needs_cuda
def test_cuda_sets_too_large_for_the_chosen_memory_name_the_sizes():
    huge = torch.zeros(1, 3, 1, 1, dtype=torch.uint8).expand(2**30, 3, 64, 64)
    data = ImageTensors(huge, torch.zeros(1, dtype=torch.int64).expand(2**30))
    for storage, message in (("device", "GiB free on cuda"), ("pinned", "GiB of host memory")):
        loader = GPUBatchLoader.for_pretraining(
            data, 4, noisy_views, storage=storage, device="cuda"
        )
        with pytest.raises(ConfigError, match=message):
            next(iter(loader))
