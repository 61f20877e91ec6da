"""Saying so on the image itself: results of random weights carry it in their PNG metadata (always,
through :func:`nstcam.image.save_image`) and, where a person shares them (the app's downloads, the
CLI's files: ``nstcam.cli.mark_file``), as a visible label."""

from __future__ import annotations

from typing import Any

from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

__all__ = ["RANDOM_LABEL", "is_random", "mark_random", "png_info", "tag_weights"]

RANDOM_LABEL = "RANDOM WEIGHTS: not meaningful"


def tag_weights(img: Image.Image, notice: str, random: bool) -> Image.Image:
    """Records where ``img`` came from in ``img.info["nstcam"]`` (kept by :func:`png_info`)."""
    meta = img.info.setdefault("nstcam", {})
    if isinstance(meta, dict):
        meta.setdefault("weights", notice)
        meta.setdefault("random_weights", bool(random))
    return img


def is_random(img: Image.Image) -> bool:
    """``img`` says it comes from random weights (``info["nstcam"]["random_weights"]``)."""
    meta = img.info.get("nstcam")
    return isinstance(meta, dict) and bool(meta.get("random_weights"))


def png_info(img: Image.Image) -> PngInfo | None:
    """PNG text chunks ``nstcam:weights`` and ``nstcam:random_weights`` for an image tagged by the
    engines (``info["nstcam"]``); None for any other image."""
    meta: Any = img.info.get("nstcam")
    if not isinstance(meta, dict) or "random_weights" not in meta:
        return None
    info = PngInfo()
    info.add_text("nstcam:weights", str(meta.get("weights", "")))
    info.add_text("nstcam:random_weights", "true" if meta["random_weights"] else "false")
    if meta["random_weights"]:
        info.add_text("Comment", RANDOM_LABEL)
    return info


def mark_random(img: Image.Image) -> Image.Image:
    """A copy of ``img`` with :data:`RANDOM_LABEL` drawn across its foot, on a dark band (its
    metadata kept); ``img`` itself if it is not from random weights."""
    if not is_random(img):
        return img
    out = img.convert("RGB") if img.mode not in ("RGB", "RGBA") else img.copy()
    out.info = dict(img.info)
    w, h = out.size
    size = max(8, min(h // 14, w // 22))  # small: it covers the foot of the picture
    font = ImageFont.load_default(size=size)
    draw = ImageDraw.Draw(out)
    box = draw.textbbox((0, 0), RANDOM_LABEL, font=font)
    band = box[3] - box[1] + max(2, size // 3)
    draw.rectangle((0, h - band, w, h), fill=(0, 0, 0))
    at = (max(2, size // 3), h - band + (band - (box[3] - box[1])) // 2 - box[1])
    draw.text(at, RANDOM_LABEL, fill=(255, 255, 255), font=font)
    return out
