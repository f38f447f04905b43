"""The streaming source (``solo_diet.core.data.stream``): files read as bytes in solo-learn's order,
decoded per batch, random resized crops from each image at full resolution, true indices, corrupt
files named (stop or skip), and the same batches on CUDA (skipped without it)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_image

from solo_diet.core.data import augment as ops
from solo_diet.core.data.pipeline import MultiCropAugmentation
from solo_diet.core.data.stream import CorruptImage, EncodedFiles, StreamLoader, decode_images
from solo_diet.core.data.tensor_data import folder_samples
from solo_diet.core.sdiet.samplers import SuperBatchSampler
from tests._helpers.synthetic import write_jpeg_folder

SIZES = ((40, 56), (48, 32), (64, 64), (36, 44))
CLASSES, PER_CLASS, BATCH = 3, 5, 4
OFF = {"prob": 0.0}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jpegs")
    write_jpeg_folder(root, CLASSES, PER_CLASS, sizes=SIZES, seed=0)
    Image.new("L", (30, 50), 128).save(root / "class_0001" / "gray.jpg")  # one channel
    Image.new("RGB", (52, 38), (10, 200, 30)).save(root / "class_0002" / "flat.png")
    return root


def node(crop_size=24, **sections) -> dict:
    """Every op off but the random resized crop; identity normalisation."""
    base = {
        "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
        **{name: OFF for name in ("color_jitter", "grayscale", "gaussian_blur", "solarization")},
        **{name: OFF for name in ("equalization", "horizontal_flip", "random_erasing")},
        "mean": [0.0, 0.0, 0.0],
        "std": [1.0, 1.0, 1.0],
        "crop_size": crop_size,
        "num_crops": 1,
    }
    return {**base, **sections}


def loader(files, nodes, workers=0, on_corrupt="stop", device="cpu", seed=0) -> StreamLoader:
    augment = MultiCropAugmentation.from_config(nodes, "custom")
    return StreamLoader.for_pretraining(
        files, BATCH, augment, seed=seed, device=device, num_workers=workers, on_corrupt=on_corrupt
    )


def test_files_are_listed_in_image_folder_order_and_read_as_bytes(folder):
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    samples = folder_samples(folder)
    assert len(files) == len(samples) == CLASSES * PER_CLASS + 2
    assert [files.path(i) for i in range(len(files))] == [p for p, _ in samples]
    assert files.targets.tolist() == [t for _, t in samples]
    index, data, target, problem = files[7]
    assert (index, target, problem) == (7, samples[7][1], "")
    assert data.numpy().tobytes() == Path(samples[7][0]).read_bytes()


def test_unlabelled_folders_and_array_datasets(folder, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("b.jpg", "a.jpg"):
        (flat / name).write_bytes((folder / "class_0000" / "000000.jpg").read_bytes())
    files = EncodedFiles.from_folder("custom", flat, "pretrain", no_labels=True)
    assert files.targets.tolist() == [-1, -1] and len(files) == 2
    with pytest.raises(ValueError, match="^argument `dataset: cifar10` is not an image folder"):
        EncodedFiles.from_folder("cifar10", folder, "pretrain")


def test_batches_carry_true_indices_and_every_view(folder):
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    nodes = [node(num_crops=2), node(crop_size=12, num_crops=1)]
    stream = loader(files, nodes, workers=1)
    stream.set_epoch(1)
    reference = SuperBatchSampler(len(files), BATCH, seed=0)
    reference.set_epoch(1)
    batches = list(stream)
    assert len(batches) == len(stream) == len(files) // BATCH
    for (indexes, views, targets), expected in zip(batches, reference.global_batches()):
        assert torch.equal(indexes, expected) and torch.equal(targets, files.targets[expected])
        assert [tuple(v.shape) for v in views] == [(BATCH, 3, 24, 24)] * 2 + [(BATCH, 3, 12, 12)]
        assert all(v.dtype == torch.float32 and 0 <= v.min() and v.max() <= 1 for v in views)


def test_host_decoders_give_rgb_for_png_and_grayscale_jpeg(folder):
    paths = [folder / "class_0001" / "gray.jpg", folder / "class_0002" / "flat.png"]
    datas = [torch.from_numpy(np.fromfile(p, dtype=np.uint8)) for p in paths]
    images, failed = decode_images(datas, torch.device("cpu"))
    assert failed == {} and [tuple(i.shape) for i in images] == [(3, 50, 30), (3, 38, 52)]
    assert images[1][:, 0, 0].tolist() == [10, 200, 30]


def test_random_resized_crop_is_taken_from_the_full_resolution_image(folder, monkeypatch):
    """A float64 reference: the recorded box cut from the file decoded independently (PIL) and
    resized with torch's antialiased bicubic in float64, for a batch of several sizes."""
    boxes = []
    draw = ops.sample_resized_crop_boxes

    def recorded(*args, **kwargs):
        boxes.append(draw(*args, **kwargs))
        return boxes[-1]

    monkeypatch.setattr(ops, "sample_resized_crop_boxes", recorded)
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    indexes, (view,), _ = next(iter(loader(files, [node(crop_size=20)])))
    sizes = [Image.open(files.path(int(i))).size for i in indexes]
    assert len(set(sizes)) > 1  # the batch mixes sizes
    top, left, height, width = (column.tolist() for column in boxes[0])
    checked = 0
    for row, index in enumerate(indexes.tolist()):
        pixels = np.array(Image.open(files.path(index)).convert("RGB"), dtype=np.float64) / 255
        full = torch.from_numpy(pixels).permute(2, 0, 1)
        crop = full[:, top[row] : top[row] + height[row], left[row] : left[row] + width[row]]
        reference = torch.nn.functional.interpolate(
            crop[None], size=(20, 20), mode="bicubic", antialias=True, align_corners=False
        )[0].clamp(0, 1)
        torch.testing.assert_close(view[row].double(), reference, atol=2e-6, rtol=0)
        checked += max(height[row], width[row]) > 20  # a crop larger than the view: downscaled
    assert checked > 0


def test_a_list_of_one_size_is_cropped_as_the_stacked_batch():
    images = torch.randint(0, 256, (5, 3, 30, 41), dtype=torch.uint8)
    augment = MultiCropAugmentation.from_config(
        [node(crop_size=16, num_crops=2, horizontal_flip={"prob": 0.5})], "custom"
    )
    stacked = augment(images, torch.Generator().manual_seed(3))
    listed = augment(list(images), torch.Generator().manual_seed(3))
    for a, b in zip(stacked, listed):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_resize_center_crop_of_a_list_matches_each_image():
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in SIZES]
    flip = torch.tensor([True, False, False, True, False, True, True, False])
    out = ops.resize_center_crop(images, 20, 16, flip, "bilinear")
    for row in range(8):
        alone = ops.resize_center_crop(images[row % 4][None], 20, 16, flip[row : row + 1])
        torch.testing.assert_close(out[row], alone[0], atol=1e-6, rtol=0)


@pytest.fixture
def broken(folder, tmp_path) -> Path:
    """The folder with a truncated JPEG and a file that is not an image."""
    root = tmp_path / "broken"
    for path, _ in folder_samples(folder):
        target = root / Path(path).relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(path).read_bytes())
    whole = (root / "class_0000" / "000001.jpg").read_bytes()
    (root / "class_0000" / "000001.jpg").write_bytes(whole[: len(whole) // 2])
    (root / "class_0001" / "000002.jpg").write_bytes(b"not an image at all" * 10)
    return root


def corrupt_in_epoch(files: EncodedFiles, root: Path) -> tuple[set, list]:
    """(the corrupt files' indices among epoch 0's batches, those batches' indices)."""
    corrupt = {Path("class_0000/000001.jpg"), Path("class_0001/000002.jpg")}
    expected = SuperBatchSampler(len(files), BATCH, seed=0).global_batches().flatten().tolist()
    return {i for i in expected if Path(files.path(i)).relative_to(root) in corrupt}, expected


def test_a_corrupt_file_stops_the_run_naming_it(broken):
    files = EncodedFiles.from_folder("custom", broken, "pretrain")
    with pytest.raises(CorruptImage, match=r"000001\.jpg|000002\.jpg") as raised:
        for _ in loader(files, [node()], workers=1):
            pass
    assert "argument `on_corrupt: skip`" in str(raised.value)


def test_a_corrupt_file_is_skipped_by_name_when_asked(broken, capsys):
    files = EncodedFiles.from_folder("custom", broken, "pretrain")
    bad, expected = corrupt_in_epoch(files, broken)
    stream = loader(files, [node()], on_corrupt="skip")
    seen = []
    for indexes, views, targets in stream:
        assert len(indexes) == BATCH and views[0].shape[0] == BATCH
        assert torch.equal(targets, files.targets[indexes])
        seen += indexes.tolist()
    assert bad and not bad & set(seen) and set(seen) <= set(expected)
    assert len(seen) == len(expected)
    assert set(stream.skipped) == {files.path(i) for i in bad}
    err = capsys.readouterr().err
    assert all(f"skipping the corrupt image {path}" in err for path in stream.skipped)


def test_bad_arguments_are_named(folder):
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    with pytest.raises(ValueError, match="^argument `on_corrupt` must be one of"):
        loader(files, [node()], on_corrupt="ignore")
    with pytest.raises(ValueError, match="^argument `num_workers` must be an integer >= 0"):
        loader(files, [node()], workers=-1)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_nvjpeg_decodes_as_the_host_does(folder):
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    datas = [files[i][1] for i in range(len(files))]
    on_gpu, failed = decode_images(datas, torch.device("cuda"))
    assert failed == {} and all(image.is_cuda for image in on_gpu)
    for data, image in zip(datas, on_gpu):
        host = decode_image(data, mode=ImageReadMode.RGB)
        assert image.shape == host.shape
        # nvJPEG and libjpeg-turbo upsample chroma differently: a few levels on noisy pixels
        assert (image.cpu().int() - host.int()).abs().float().mean() < 6.0


@cuda
def test_nvjpeg_never_writes_memory_the_current_stream_still_reads(folder):
    """Blocks freed while their reads are still queued (a training step's) must not receive a
    decode (pytorch/vision#9606: NaN weights on an H200 before the fix)."""
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    datas = [files[i][1] for i in range(len(files))]
    device = torch.device("cuda")
    sizes = [image.numel() for image in decode_images(datas, device)[0]]
    wrong = 0
    for _ in range(20):
        held = [torch.ones(-(-size // 4), device=device) for size in sizes]  # the same blocks
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)  # about 10 ms of queued work before the reads
        sums = torch.stack([values.sum() for values in held])
        expected = torch.tensor([float(values.numel()) for values in held])
        del held
        decode_images(datas, device)
        wrong += int((sums.cpu() != expected).sum())
    assert wrong == 0


@cuda
def test_cuda_batches_match_the_cpu_ones_and_name_corrupt_files(folder, broken):
    files = EncodedFiles.from_folder("custom", folder, "pretrain")
    fixed = [node(rrc={"enabled": False})]  # resize + centre crop: no draw reaches the pixels
    on_cpu = list(loader(files, fixed, workers=2))
    on_gpu = list(loader(files, fixed, workers=2, device="cuda"))
    for (i_cpu, (v_cpu,), t_cpu), (i_gpu, (v_gpu,), t_gpu) in zip(on_cpu, on_gpu):
        assert torch.equal(i_cpu, i_gpu.cpu()) and torch.equal(t_cpu, t_gpu.cpu())
        assert (v_cpu - v_gpu.cpu()).abs().mean() < 0.02  # JPEG decoders differ by a level or two
    corrupt = EncodedFiles.from_folder("custom", broken, "pretrain")
    with pytest.raises(CorruptImage, match=r"000001\.jpg|000002\.jpg"):
        list(loader(corrupt, [node()], device="cuda"))
    skipping = loader(corrupt, [node()], device="cuda", on_corrupt="skip")
    assert sum(len(batch[0]) for batch in skipping) == len(skipping) * BATCH
    bad, _ = corrupt_in_epoch(corrupt, broken)
    assert set(skipping.skipped) == {corrupt.path(i) for i in bad}


def test_views_without_random_crop_centre_crop_each_image():
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in SIZES]
    augment = MultiCropAugmentation.from_config(
        [node(rrc={"enabled": False}, num_crops=2)], "custom"
    )
    first, second = augment(images, torch.Generator().manual_seed(0))
    for i, image in enumerate(images):
        alone = ops.resize_center_crop(image[None], 24, 24, None, "bicubic")[0]
        torch.testing.assert_close(first[i], alone, atol=1e-6, rtol=0)
        torch.testing.assert_close(second[i], alone, atol=1e-6, rtol=0)
