"""How a ``solo-diet`` command ends, the errors naming a data file or a full disk, and what our
launchers refuse of a folder dataset's paths before any image is read."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf

from solo_diet.core.data import FOLDER_DATASETS
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader

EXIT_USER_ERROR = 2
EXIT_DISK_FULL = 1


class DataError(ConfigError):
    """The input data cannot be used as configured (missing, unreadable, wrong layout)."""


class UnreadableImage(DataError):
    """An image file could not be decoded; the message names the file (our last line only)."""

    def __init__(self, message: str):
        lines = [line for line in str(message).strip().splitlines() if line.strip()]
        if len(lines) > 1 and lines[-1].startswith(f"{__name__}.{type(self).__name__}: "):
            message = lines[-1].split(": ", 1)[1]
        super().__init__(message)


def _read_naming(loader: Callable[[str], Any], path: str) -> Any:
    """``loader(path)``, a file it cannot decode an ``UnreadableImage`` naming it."""
    try:
        return loader(path)
    except (OSError, SyntaxError, ValueError) as err:  # PIL's decoding errors
        problem = f"{type(err).__name__}: {err}"
        message = f"cannot read image {path} ({problem}): replace or delete the file."
        raise UnreadableImage(message) from err


def name_unreadable_images(dataset: Any) -> None:
    """Make an ImageFolder-style dataset (``loader``, ``samples``) name the files it cannot read."""
    loader = getattr(dataset, "loader", None)
    if hasattr(dataset, "samples") and loader and getattr(loader, "func", None) is not _read_naming:
        dataset.loader = functools.partial(_read_naming, loader)


@contextlib.contextmanager
def download_failure_named(data: Any, *path_keys: str) -> Iterator[None]:
    """In the block, a failed torchvision download is one ``DataError`` naming the path keys."""
    from urllib.error import URLError

    try:
        yield
    except (URLError, ConnectionError, TimeoutError) as err:
        dataset = data.dataset
        where = " / ".join(f"`data.{key}` {getattr(data, key)}" for key in path_keys)
        raise DataError(
            f"`data.dataset: {dataset}`: its files are not under {where}, and downloading them "
            f"failed ({getattr(err, 'reason', None) or err}). Copy torchvision's {dataset} files "
            "there from a machine with a network (or run once where it is reachable), or use "
            "`data.dataset: custom` with an image folder (`solo-diet data` writes some)."
        ) from err


class DiskFull(Exception):
    """No space left on the device while saving ``path``: the previous file stays as it was."""

    def __init__(self, path: Path):
        folder, free = path.parent, "free space unknown"
        with contextlib.suppress(OSError):
            free = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free"
        super().__init__(
            f"no space left on the device of {folder} ({free}) while saving {path.name}: free some "
            "space and run the same command again; it resumes from the last complete checkpoint."
        )


@contextlib.contextmanager
def disk_full_named(path: Path) -> Iterator[None]:
    """An ``ENOSPC`` in the block (also wrapped by torch's zip writer) is one :class:`DiskFull`."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        cause: Optional[BaseException] = err
        while cause is not None and getattr(cause, "errno", None) != errno.ENOSPC:
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise DiskFull(path) from err


# the split folders of a dataset root: refused in `data.train_path`, where each would be a class
SPLIT_FOLDERS = ("train", "val", "validation", "test")


def class_folders(path: Any) -> set[str]:
    """The subfolders of an image folder: its classes, as solo-learn and torchvision read them."""
    return {entry.name for entry in os.scandir(str(path)) if entry.is_dir()}


def same_class_folders(train: Any, val: Any) -> None:
    """Refuse image folders ``train`` and ``val`` whose class subfolders differ."""
    in_train, in_val = class_folders(train), class_folders(val)
    if in_train != in_val:
        raise ConfigError(
            f"`data.val_path` = {val} and `data.train_path` = {train} hold different class "
            f"folders (only in val: {sorted(in_val - in_train)}, only in train: "
            f"{sorted(in_train - in_val)}), so the val labels would not match the trained "
            "ones: give both the same class subfolders."
        )


def check_data_paths(cfg: DictConfig) -> None:
    """Refuse a missing ``data.train_path``/``data.val_path``, or a dataset root as train path."""
    if OmegaConf.select(cfg, "data.dataset") not in FOLDER_DATASETS:
        return  # torchvision's datasets download into their path
    read = KeyReader(cfg)
    train, val = read.value("data.train_path", None), read.value("data.val_path", None)
    for key, path in (("data.train_path", train), ("data.val_path", val)):
        if path is not None and not Path(str(path)).exists():
            raise read.fail(
                key,
                f"{path} does not exist: point it at an image folder with one subfolder per class.",
            )
    if train is None or not Path(str(train)).is_dir():
        return
    root = Path(str(train))
    splits = sorted(class_folders(root) & set(SPLIT_FOLDERS))
    holds_val = val is not None and root.resolve() in Path(str(val)).resolve().parents
    if not ("train" in splits or len(splits) > 1 or holds_val):
        return
    fix = "point it at the training images alone (one subfolder per class)"
    if "train" in splits:
        fix = f"pass data.train_path={root / 'train'}"
        fix += f" data.val_path={root / 'val'}" if "val" in splits else ""
    held = ", ".join(f"{split}/" for split in splits) if splits else f"`data.val_path` {val}"
    raise read.fail(
        "data.train_path",
        f"= {root} is a dataset root: it holds {held}, each of which would be trained on as a "
        f"class; {fix}.",
    )


def check_destination(folder: Any, what: str) -> None:
    """Refuse a folder to write into that is a file, lies under one, or is read-only."""
    path = Path(str(folder)).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{what} {folder}: {existing} is a file, not a folder: pick another.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{what} {folder}: {existing} is not writable (a read-only file system or folder): "
            "pick a folder you can write to."
        )


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM (``resume``: where to resume), a KeyboardInterrupt."""

    def __init__(self, signum: int = signal.SIGINT, resume: Optional[str] = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.resume = resume

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM (a pre-emption) raises ``Interrupted`` as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def user_message(err: Exception) -> Optional[str]:
    """A user error's one line (a missing solo-learn: the install hint); None for a bug."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    from solo_diet.host import INSTALL_HINT, SoloLearnMissing

    if isinstance(err, (SoloLearnMissing, DiskFull)):
        return str(err).strip()
    if isinstance(err, ModuleNotFoundError):
        missing = (err.name or "").split(".")[0] == "solo"
        return f"solo-learn is not installed ({err}).\n{INSTALL_HINT}" if missing else None
    if isinstance(err, AssertionError):
        return solo_rejection(err)
    files = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)
    user = (ConfigError, *files, PermissionError, HydraException, OmegaConfBaseException, YAMLError)
    if isinstance(err, user) or (isinstance(err, OSError) and err.errno == errno.EROFS):
        text = str(err).strip() or type(err).__name__
        return " ".join(part.strip() for part in text.splitlines())
    return None


def run_guarded(
    command: str, func: Callable[[], int], debug: bool = False, resume: str = ""
) -> int:
    """Run one command: exit 2 (user error), 1 (full disk), 128 + signal, each one line."""

    def report(message: str) -> None:
        if debug or os.environ.get("SOLO_DIET_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        print(f"solo-diet {command}: {message}", file=sys.stderr)

    try:
        with sigterm_interrupts():
            return func()
    except KeyboardInterrupt as err:
        stop = err if isinstance(err, Interrupted) else Interrupted(signal.SIGINT)
        where = (
            resume or stop.resume or "nothing was saved; run the same command again to start over."
        )
        report(f"interrupted by {signal.Signals(stop.signum).name}; {where}")
        return stop.exit_code
    except Exception as err:
        message = user_message(err)
        if message is None:
            raise
        report(message)
        return EXIT_DISK_FULL if isinstance(err, DiskFull) else EXIT_USER_ERROR


def solo_rejection(err: AssertionError) -> Optional[str]:
    """The failed check when one of solo-learn's own ``assert``s raised ``err``, else None."""
    solo = sys.modules.get("solo")
    frames = traceback.extract_tb(err.__traceback__)
    if solo is None or not frames:
        return None
    where = os.path.abspath(frames[-1].filename)
    if not any(where.startswith(os.path.join(os.path.abspath(p), "")) for p in solo.__path__):
        return None
    return f"solo-learn rejected the config: {str(err) or frames[-1].line} (in {frames[-1].name})."
