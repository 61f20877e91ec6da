"""What a picture costs at the network, read from its header before anything decodes it.

The CAM engine scales an image's *short* side to the network's input size and lets the long side
follow, so a thin image is as many passes' worth of pixels as it is long: a 4.7 KB PNG of
100000 x 16 px went to ``/features`` as a 224 x 1,400,000 tensor (over 7 GB in seconds), and a
1000 x 16 one killed the server in a trust report (11.2 GB). Pass counts alone priced both as one
photo. So every image (and every clip's frame) the CAM engine takes is held here to:

- :data:`MAX_ASPECT`, its long side over its short side, from its header (the per-pass memory bound:
  no pass is more than :func:`widest_factor` photos' worth of pixels);
- :func:`pass_factor`, how many photos' worth of pixels each pass holds after the engine's own
  resizing (a 16:9 photo, or anything squarer, is 1), which every estimator of
  :mod:`nstcam.app.guard.cost` multiplies its passes by;
- :func:`kpca_passes`, KPCA-CAM's eigensolve counted in forward passes by the positions of its layer
  at that size (its time grows as their cube).
"""

from __future__ import annotations

import functools
import math

from nstcam.app.errors import refuse

__all__ = [
    "KPCA_POSITIONS_PER_PASS",
    "MAX_ASPECT",
    "REFERENCE_ASPECT",
    "check_aspect",
    "kpca_passes",
    "layer_positions",
    "network_side",
    "network_size",
    "pass_factor",
    "widest_factor",
]

MAX_ASPECT = 4.0
"""Longest side over shortest side of an image the network scales by its short side (a phone's
panorama is 3:1 to 4:1); over it, refused from the header."""
REFERENCE_ASPECT = 16 / 9
"""A pass is counted as one photo of this shape at the network's input size (a 16:9 photo, 398 x 224
px at 224): a camera's shapes (4:3, 3:2, 16:9) are one pass, a thinner image its share more."""
KPCA_POSITIONS_PER_PASS = 475
"""Positions whose KPCA-CAM eigensolve is counted as one masked image of Score-CAM (the unit of
``NSTCAM_SCORECAM_BUDGET``), its cost growing as the cube of the positions: fitted where it matters,
on large layers (``python tests/benchmarks/bench_kpca_cost.py``: 1,400 positions took 24.5 masked
images' time, 2,000 took 78.3), and over-counted below (the eigensolve of a small layer costs less
than a pass, counted as one)."""


@functools.cache
def network_side(arch: str) -> tuple[int, bool]:
    """The side the engine scales an image to for ``arch`` and whether it is an exact square (a
    ViT's): the official weights' crop size (224 for most classifiers, 112 for the video ones)."""
    from torchvision.models import get_model_weights

    from nstcam.cam.layers import arch_spec, skeleton

    square = getattr(arch_spec(skeleton(arch)), "square", None)
    if square:
        return int(square), True
    try:
        crop = get_model_weights(arch).DEFAULT.transforms().crop_size
        return int(crop[0]), False
    except (ValueError, AttributeError, IndexError, TypeError):
        return 224, False


def network_size(arch: str, size: tuple[int, int]) -> tuple[int, int]:
    """``(width, height)`` of an image of ``size`` once the engine has resized it for ``arch``: its
    short side at :func:`network_side`, the long side following (a fixed-size model: its square)."""
    side, square = network_side(arch)
    if square:
        return side, side
    w, h = size
    s = side / max(1, min(w, h))
    return max(1, round(w * s)), max(1, round(h * s))


def pass_factor(arch: str, size: tuple[int, int] | None) -> float:
    """How many 16:9 photos' worth of pixels one pass over an image of ``size`` holds for ``arch``
    (at least 1; None, unknown: 1)."""
    if size is None:
        return 1.0
    side, _ = network_side(arch)
    w, h = network_size(arch, size)
    return max(1.0, w * h / (side * round(side * REFERENCE_ASPECT)))


def widest_factor(arch: str) -> float:
    """:func:`pass_factor` of the thinnest image :data:`MAX_ASPECT` lets through (2.25 passes' worth
    where the short side is scaled)."""
    side, _ = network_side(arch)
    return pass_factor(arch, (math.floor(side * MAX_ASPECT), side))


def check_aspect(name: str, size: tuple[int, int], what: str = "an image") -> None:
    """Refuses (one line, naming ``name``) an image whose long side is over :data:`MAX_ASPECT` times
    its short side."""
    w, h = size
    ratio = max(w, h) / max(1, min(w, h))
    if ratio > MAX_ASPECT:
        raise refuse(
            f"{name} is {w} x {h} px ({ratio:.3g}:1); {what} the network scales by its short side may be at "
            f"most {MAX_ASPECT:g}:1 (long side / short side) on this server: a thin image costs as many "
            "passes as it is long. Crop it."
        )


def _layer_stride(arch: str, layer: str) -> float | None:
    """How many input pixels one position of ``layer`` spans (None: a layer of tokens or of no
    grid), read from the skeleton :func:`nstcam.app.layers.meta_layers` reads."""
    from nstcam.app.layers import meta_grid, meta_side

    grid = meta_grid(arch, layer)
    return None if grid is None else meta_side(arch) / max(1, grid[1])


def layer_positions(arch: str, layer: str, size: tuple[int, int] | None) -> int:
    """Positions (h x w) of ``layer``'s activation for an image of ``size`` (None: a square photo)."""
    side, _ = network_side(arch)
    w, h = network_size(arch, size or (side, side))
    stride = _layer_stride(arch, layer)
    if stride is None:  # tokens: one per patch of 16 px
        stride = 16.0
    return max(1, math.ceil(h / stride)) * max(1, math.ceil(w / stride))


def kpca_passes(arch: str, layer: str, size: tuple[int, int] | None) -> int:
    """KPCA-CAM's eigensolve of ``layer``'s positions, in forward passes of a 16:9 photo: the cube of
    the positions over :data:`KPCA_POSITIONS_PER_PASS` (at least 1)."""
    n = layer_positions(arch, layer, size)
    return max(1, math.ceil((n / KPCA_POSITIONS_PER_PASS) ** 3))
