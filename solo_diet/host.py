"""The package's link to its host: finding solo-learn ``main``, failing clearly when it is absent or
too old, and quieting its noise. It imports nothing of solo-learn's at module level, and no floor
of the package, so ``import solo_diet`` stays cheap."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import logging
import re
import sys
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Optional

INSTALL_HINT = (
    "solo-diet needs solo-learn `main` (1.0.6, Hydra configs, Lightning 2) installed from its git "
    "source; PyPI's solo-learn 1.0.2 (2021, torch 1.9) cannot work. Install it with:\n"
    "    pip install 'setuptools>=77.0.3,<81' wheel\n"
    "    git clone https://github.com/vturrisi/solo-learn && cd solo-learn\n"
    "    pip install --no-build-isolation --use-pep517 -e '.[umap,h5]'\n"
    "then install solo-diet (see README.md)."
)

# Import-time deprecation noise of solo-learn's pinned stack (lightning 2.1.2, timm, torch.cuda.amp)
IMPORT_NOISE = (
    "pkg_resources is deprecated",
    "Importing from timm",
    "Overwriting .* in registry",
    ".*torch.cuda.amp.custom_fwd",
)

SCHEDULER_INTERVAL_NOISE = "Using scheduler_interval=step might generate issues when resuming"


def _not_scheduler_interval_noise(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(SCHEDULER_INTERVAL_NOISE)


def quiet_run_noise() -> None:
    """Silence in this process (idempotent; solo-learn is left as it is) what every run prints
    that says nothing about it: Lightning's banners and summary, torch's pin_memory warning on a
    CPU, a LeafSpec deprecation, solo-learn's scheduler_interval warning (logged on root)."""
    for name in ("utilities.rank_zero", "callbacks.model_summary"):
        logging.getLogger(f"lightning.pytorch.{name}").setLevel(logging.WARNING)
    for name in ("utilities.rank_zero", "utilities.seed"):
        logging.getLogger(f"lightning.fabric.{name}").setLevel(logging.WARNING)
    warnings.filterwarnings(
        "ignore", "'pin_memory' argument is set as true but no accelerator is found"
    )
    warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    logging.getLogger().addFilter(_not_scheduler_interval_noise)


# solo-learn's optional UMAP callback: it imports pandas, seaborn and matplotlib before umap
UMAP_CALLBACK = "solo.utils.auto_umap"


def skip_umap_callback_without_umap() -> None:
    """Without ``umap``, fail solo-learn's UMAP callback import at once (a faster start-up)."""
    if importlib.util.find_spec("umap") is None and "solo.utils" not in sys.modules:
        sys.modules.setdefault(UMAP_CALLBACK, None)  # `import` raises ImportError


class SoloLearnMissing(ImportError):
    """solo-learn main is not importable in this environment."""


@lru_cache(maxsize=None)
def solo_problem() -> str | None:
    """Why solo-learn main cannot be used here, or None when it can."""
    if importlib.util.find_spec("solo") is None:
        return "solo-learn is not installed."
    skip_umap_callback_without_umap()
    try:
        with warnings.catch_warnings():
            for pattern in IMPORT_NOISE:
                warnings.filterwarnings("ignore", message=pattern)
            methods = importlib.import_module("solo.methods")
    except Exception as err:  # the 2021 release dies on pl_bolts; a broken env on pkg_resources
        return f"`import solo.methods` failed ({type(err).__name__}: {err})."
    if not hasattr(methods, "METHODS") or importlib.util.find_spec("solo.args.pretrain") is None:
        return "the installed solo-learn is not `main` (no solo.methods.METHODS / solo.args)."
    return None


def solo_available() -> bool:
    return solo_problem() is None


def require_solo() -> None:
    """Raise one clear error that says how to install solo-learn when it is unusable."""
    problem = solo_problem()
    if problem is not None:
        raise SoloLearnMissing(f"{problem}\n{INSTALL_HINT}")


# The entry-point group through which a package of one's own adds methods (docs/adding-a-method.md)
METHODS_GROUP = "solo_diet.methods"
_REGISTERED_AS = re.compile(r"^\s+registered_as = \"(\w+)\"", flags=re.MULTILINE)


def declared_method_names() -> Optional[set[str]]:
    """Every method name the registry can hold, read from source; None if unreadable."""
    spec = importlib.util.find_spec("solo")
    source = Path(spec.origin).parent / "methods" / "__init__.py" if spec and spec.origin else None
    if source is None or not source.is_file():
        return None
    tree = ast.parse(source.read_text())
    found = {
        key.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", "") for t in node.targets] == ["METHODS"]
        for key in getattr(node.value, "keys", ())
        if isinstance(key, ast.Constant)
    }
    ours = Path(__file__).parent / "methods"  # solo_diet/methods/
    found |= {
        name for path in ours.glob("*.py") for name in _REGISTERED_AS.findall(path.read_text())
    }
    found |= {entry.name for entry in importlib.metadata.entry_points(group=METHODS_GROUP)}
    registry = sys.modules.get("solo.methods")  # what this process registered already
    found |= set(getattr(registry, "METHODS", {}))
    return found | {f"{name}_sem" for name in found}
