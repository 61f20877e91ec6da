"""A fast network's picture, whole or in tiles: which, and the painting itself (issue 76).

A picture whose untiled pass is estimated past ``MEMORY_BUDGET`` is painted in tiles (``auto_tile``)
with the whole picture's normalisation statistics (:mod:`nstcam.fast._tiled`); a smaller one, or
one that fits in a single tile, in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from nstcam.color import ColorSums, color_map, preserve_colors
from nstcam.fast._tiled import MEMORY_BUDGET, Stages, auto_tile, paint_tiled, untiled_bytes
from nstcam.image import image_to_tensor, tensor_to_image

__all__ = ["chosen_tile", "pad4", "paint"]


def pad4(x: torch.Tensor) -> torch.Tensor:
    """Reflect-padded to multiples of 4 (the networks halve twice and double twice)."""
    h, w = x.shape[-2:]
    return F.pad(x, (0, -w % 4, 0, -h % 4), mode="reflect")


def chosen_tile(net: str, img: Image.Image, tile: int | None) -> int | None:
    """The tile ``img`` is painted in on network ``net``: ``tile`` as asked (None where the picture
    fits in one), else :func:`auto_tile`'s where the untiled pass is estimated past ``MEMORY_BUDGET``."""
    if tile is None and untiled_bytes(net, img.height, img.width) > MEMORY_BUDGET:
        tile = auto_tile(net)
    return None if tile is not None and max(img.size) <= tile else tile


def paint(
    stages: Stages,
    img: Image.Image,
    tile: int | None,
    finish: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    histogram: bool,
    device: torch.device,
) -> Image.Image:
    """``img`` painted by ``stages``, whole (``tile`` None) or in tiles; ``finish(painting, photo)``
    per pixel (strength, luminance); ``histogram``: then recoloured to the photo's colour statistics."""
    if tile is None:
        x = image_to_tensor(img, device)
        out = finish(stages(pad4(x))[..., : x.shape[-2], : x.shape[-1]], x)
        if histogram:
            out = preserve_colors(out, x, "histogram")
        return tensor_to_image(out)
    photo = np.asarray(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)
    recolour = _recolour if histogram else None
    return Image.fromarray(paint_tiled(stages, photo, tile, finish, device, recolour), "RGB")


def _recolour(
    finished: Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``preserve_color="histogram"`` on a tiled picture: the map that gives the finished result
    (read once, core by core) the photo's colour statistics."""
    result, photo = ColorSums(), ColorSums()
    for out, x in finished():
        result.add(out)
        photo.add(x)
    return color_map(result.stats(), photo.stats())
