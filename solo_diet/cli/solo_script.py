"""Runs solo-learn's main_knn.py and main_umap.py with solo-diet's methods registered; pretrain and
probe with ``solo-diet pretrain`` and ``solo-diet linear`` (main_pretrain.py is refused for
ours)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Optional, Sequence

from solo_diet.core.errors import ConfigError

# the scripts it is for, which put their tensors on "cuda" whatever the config says
CUDA_ONLY = ("main_knn.py", "main_umap.py")


def _hydra_option(args: Sequence[str], long: str, short: str) -> Optional[str]:
    """The value of ``--config-path X``, ``--config-path=X`` or ``-cp X`` in ``args``."""
    for i, arg in enumerate(args):
        if arg in (long, short) and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{long}="):
            return arg.partition("=")[2]
    return None


def check_script_method(script: Path, args: Sequence[str]) -> None:
    """Refuse solo-learn's pretraining script for a solo-diet method, naming our launcher."""
    from solo.methods import METHODS

    from solo_diet.launch.common import compose_cfg

    path = _hydra_option(args, "--config-path", "-cp")
    name = _hydra_option(args, "--config-name", "-cn")
    if script.name != "main_pretrain.py" or path is None or name is None:
        return
    folder = Path(path).expanduser()
    if not folder.is_absolute():  # Hydra reads it relative to the script, we also try the cwd
        folder = next((f for f in (script.parent / folder, folder) if f.is_dir()), folder)
    overrides = [a for a in args if "=" in a and not a.startswith(("-", "hydra"))]
    try:
        method = compose_cfg(str(folder), name, overrides).get("method")
    except Exception:  # noqa: BLE001 - a config we cannot compose is the script's to report
        return
    cls = METHODS.get(method) if isinstance(method, str) else None
    if cls is not None and cls.__module__.startswith("solo_diet."):
        raise ConfigError(
            f"`method: {method}` is a solo-diet method, which solo-learn's main_pretrain.py "
            "cannot set up: use `solo-diet pretrain` with the same --config-path, --config-name "
            "and overrides."
        )


def run_solo_script(script_path: str, script_args: Sequence[str]) -> None:
    """Run ``script_path`` as ``__main__`` with ``script_args``, the plugin methods registered."""
    import torch

    import solo_diet

    script = Path(script_path)
    if not script.is_file():
        raise ConfigError(
            f"{script} does not exist: pass the path of a solo-learn checkout's script "
            f"({', '.join(CUDA_ONLY)})."
        )
    if script.name in CUDA_ONLY and not torch.cuda.is_available():
        raise ConfigError(
            f"solo-learn's {script.name} puts its tensors on CUDA, and torch sees no CUDA device "
            "here: run it on a machine with an NVIDIA GPU (`solo-diet linear` probes on the CPU)."
        )
    solo_diet.register()
    check_script_method(script, script_args)
    sys.argv = [str(script)] + list(script_args)
    runpy.run_path(str(script), run_name="__main__")
