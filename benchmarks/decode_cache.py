"""What the decode cache saves: decoding an image folder against reading its cached tensor.

Every run on the GPU data path decodes its sets (pretraining: train and val; `compare`'s evaluation
and the linear probe: train and val again). This times, for one image folder, the decode with the
given thread counts (cache off), the first run with the cache on (decode and write the entry) and a
later run (read the entry), each the median of ``--repeats``. Prints one table.

    python benchmarks/decode_cache.py --root /data/am/train      # a folder `solo-diet data` wrote
    python benchmarks/decode_cache.py                            # a synthetic 5 000-image folder
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from solo_diet.core.data.decode_cache import CACHE_ENV
from solo_diet.core.data.tensor_data import load_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/_helpers/
from tests._helpers.synthetic import write_image_folder  # noqa: E402


def median_wall(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="an ImageFolder (default: a synthetic one)")
    parser.add_argument("--images", type=int, default=5000, help="synthetic images (32 px)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, len(os.sched_getaffinity(0))])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = (
            Path(args.root)
            if args.root
            else write_image_folder(
                Path(scratch) / "data", num_classes=10, per_class=args.images // 10, size=32
            )
        )
        os.environ[CACHE_ENV] = str(Path(scratch) / "cache")
        rows = []
        for threads in args.threads:
            seconds = median_wall(
                lambda: load_images("custom", root, "train", threads=threads), args.repeats
            )
            rows.append((f"decode, {threads} thread(s), cache off", seconds))
        threads = args.threads[-1]

        def first_run() -> None:
            for entry in Path(os.environ[CACHE_ENV]).glob("*.pt"):
                entry.unlink()
            load_images("custom", root, "train", threads=threads, cache=True)

        rows.append(
            (
                f"first run, {threads} thread(s): decode + write the entry",
                median_wall(first_run, args.repeats),
            )
        )
        count = len(load_images("custom", root, "train", cache=True))
        rows.append(
            (
                "later run: read the entry",
                median_wall(lambda: load_images("custom", root, "train", cache=True), args.repeats),
            )
        )
    print(
        f"{count} images from {args.root or 'a synthetic 32 px folder'}; median of {args.repeats}\n"
    )
    print("| case | seconds |\n|---|---:|")
    for case, seconds in rows:
        print(f"| {case} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
