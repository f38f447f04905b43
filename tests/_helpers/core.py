"""The package's floors (tests/core/test_floors.py) and the bad augmentation nodes the core and
the launchers refuse."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PACKAGE = REPO / "solo_diet"

FLOORS = ("cli", "compare", "launch", "methods")  # top first; solo_diet/core/ lies below them all
# the package's own root: registration (``__init__``) and finding solo-learn (``host``)
ROOT_MODULES = (("__init__.py",), ("host.py",))


def _floor(path: Path) -> str:
    """The floor folder of a module of the package (``package``: its ``__init__.py``)."""
    parts = path.relative_to(PACKAGE).parts
    if parts[0] in (*FLOORS, "core"):
        return parts[0]
    return "package" if parts in ROOT_MODULES else "none"


# a bad second node and the argument its error names (tests/launch: the key it becomes)
BAD_NODES = [
    (
        {"color_jitter": {"prob": 0.8, "brighness": 0.4}},
        "nodes[1].color_jitter.brighness",
    ),
    ({"colour_jitter": {"prob": 0.8}}, "nodes[1].colour_jitter"),
    ({"grayscale": {"prob": 1.5}}, "nodes[1].grayscale.prob"),
    ({"grayscale": 0.2}, "nodes[1].grayscale"),
    (
        {"color_jitter": {"prob": 0.8, "brightness": -0.1}},
        "nodes[1].color_jitter.brightness",
    ),
    ({"color_jitter": {"prob": 0.8, "hue": 0.7}}, "nodes[1].color_jitter.hue"),
    ({"rrc": {"enabled": True, "crop_min_scale": 0.0}}, "nodes[1].rrc.crop_min_scale"),
    ({"rrc": {"enabled": "yes"}}, "nodes[1].rrc.enabled"),
    ({"num_crops": 0}, "nodes[1].num_crops"),
    ({"crop_size": "32"}, "nodes[1].crop_size"),
    ({"mean": [0.5, 0.5, 0.5]}, "nodes[1].mean"),
    ({"std": [0.2, 0.0, 0.2]}, "nodes[1].std"),
]
