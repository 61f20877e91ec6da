"""Where the windows of a tiled scale lie (shared by the tiled optimisation and the tiled Grams)."""

from __future__ import annotations

import math

__all__ = ["Window", "starts", "tile_grid"]

Window = tuple[slice, slice]


def starts(length: int, tile: int, overlap: int) -> list[int]:
    """Start positions of windows of ``tile`` px covering ``length`` px, neighbours overlapping by
    at least ``overlap`` px, spread evenly (one window when ``length <= tile``)."""
    if length <= tile:
        return [0]
    k = math.ceil((length - overlap) / (tile - overlap))
    return [round(i * (length - tile) / (k - 1)) for i in range(k)]


def tile_grid(height: int, width: int, tile: int, overlap: int) -> list[Window]:
    """The windows of a ``height`` x ``width`` image, row-major."""
    th, tw = min(tile, height), min(tile, width)
    return [
        (slice(y, y + th), slice(x, x + tw))
        for y in starts(height, tile, overlap)
        for x in starts(width, tile, overlap)
    ]
