"""The checks every refusal of a request's values shares: a number within this server's range, a
picture within its pixels and its shape (read from its header, nothing decoded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nstcam.app.errors import refuse
from nstcam.app.guard.inputs import upload_size
from nstcam.app.guard.shapes import check_aspect

__all__ = ["check", "check_picture"]


def check(value: float | None, name: str, lo: float, hi: float) -> None:
    """Refuses ``value`` in one line naming ``name`` and this server's range unless ``lo <= value <= hi``."""
    if value is None or not lo <= value <= hi:
        raise refuse(f"{name} must be between {lo:g} and {hi:g} on this server, got {value}")


def check_picture(path: Any, what: str, max_pixels: int) -> tuple[int, int]:
    """An upload's ``(width, height)`` from its header alone (nothing decoded), refused in one line
    naming its own file name, ``what`` it is and the limit where it holds more than ``max_pixels`` or
    is thinner than :data:`nstcam.app.guard.shapes.MAX_ASPECT` (a 1 KB 16 x 20000 PNG scaled to a 256 px
    crop was a 320000 x 256 tensor, about 1 GB)."""
    size = upload_size(path, what, max_pixels)
    check_aspect(f"{what} ({Path(str(path)).name})", size, "a picture that")
    return size
