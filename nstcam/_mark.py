"""Saying so on the image itself: results of random weights carry it in their metadata (PNG text,
a JPEG comment, an MP4's ``comment`` tag) and as a visible label in a margin added below the picture
(:func:`mark_random`), never over it: every pixel of the result stays as computed, at any size from
64 px up. :func:`nstcam.image.save_image` marks what it saves, so the Python API's save, the CLI and
the app all do. Captions of video frames and contact sheets use the same margin
(:func:`caption_strip`)."""

from __future__ import annotations

import functools
from typing import Any

from PIL import Image, ImageDraw, ImageFont
from PIL.PngImagePlugin import PngInfo

__all__ = [
    "RANDOM_LABEL",
    "caption_strip",
    "is_marked",
    "is_random",
    "mark_height",
    "mark_random",
    "png_info",
    "stack_below",
    "tag_weights",
]

RANDOM_LABEL = "RANDOM WEIGHTS: not meaningful"
MIN_FONT = 7
"""Smallest text size drawn, px (smaller is not read); a line is wrapped at spaces before that."""


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


def is_marked(img: Image.Image) -> bool:
    """``img`` already carries the visible label (:func:`mark_random` made it)."""
    meta = img.info.get("nstcam")
    return isinstance(meta, dict) and bool(meta.get("marked"))


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


@functools.lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _width(text: str, size: int) -> float:
    return ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(text, font=_font(size))


def _wrap(line: str, size: int, room: int) -> list[str] | None:
    """``line`` broken at spaces into lines at most ``room`` px wide at ``size``; None where a word
    alone is wider."""
    out: list[str] = []
    for word in line.split(" "):
        joined = f"{out[-1]} {word}" if out else word
        if out and _width(joined, size) <= room:
            out[-1] = joined
        elif _width(word, size) <= room:
            out.append(word)
        else:
            return None
    return out


def _layout(lines: tuple[str, ...], width: int, max_font: int | None = None) -> tuple[int, list[str]]:
    """The text size for ``width`` (about a twentieth of it, 7 to 24 px, at most ``max_font``) and
    ``lines`` wrapped to fit: the largest size at which every word fits, smaller only where a word
    would not."""
    target = max(MIN_FONT, min(24, width // 20, max_font or 24))
    room = max(1, width - 2 * _pad(target))
    for size in range(target, 3, -1):
        wrapped = [_wrap(line, size, room) for line in lines]
        if all(w is not None for w in wrapped):
            return size, [part for w in wrapped for part in w]  # type: ignore[union-attr]
    return 4, list(lines)  # a picture a few words wide: the text is cut at its edge


def _pad(size: int) -> int:
    return max(2, size // 3)


def caption_strip(
    lines: list[str] | tuple[str, ...], width: int, height: int = 0, max_font: int | None = None
) -> Image.Image:
    """White ``lines`` on a black strip ``width`` px wide, sized to the width (its text at most
    ``max_font`` px: a video frame's caption follows the frame's height too) and wrapped to fit it;
    at least ``height`` px tall (frames of one clip share the tallest caption's height)."""
    size, wrapped = _layout(tuple(lines), width, max_font)
    font, pad = _font(size), _pad(size)
    ascent, descent = font.getmetrics() if hasattr(font, "getmetrics") else (size, 0)
    step = ascent + descent + pad // 2
    strip = Image.new("RGB", (width, max(height, 2 * pad + step * len(wrapped))), (0, 0, 0))
    draw = ImageDraw.Draw(strip)
    for i, line in enumerate(wrapped):
        draw.text((pad, pad + i * step), line, fill=(255, 255, 255), font=font)
    return strip


def stack_below(img: Image.Image, strip: Image.Image) -> Image.Image:
    """``img`` with ``strip`` under it (its own pixels untouched), its ``info`` kept."""
    base = img.convert("RGB") if img.mode not in ("RGB", "RGBA", "L") else img
    out = Image.new(base.mode, (base.width, base.height + strip.height), 0)
    out.paste(base, (0, 0))
    out.paste(strip.convert(base.mode), (0, base.height))
    out.info = dict(img.info)
    return out


def mark_height(width: int) -> int:
    """How many px :func:`mark_random` adds below a picture ``width`` px wide."""
    return caption_strip([RANDOM_LABEL], width).height


def mark_random(img: Image.Image) -> Image.Image:
    """A copy of ``img`` with :data:`RANDOM_LABEL` in a margin below it, sized to its width (its
    metadata kept, noted as marked); ``img`` itself if it is not from random weights or is marked
    already."""
    if not is_random(img) or is_marked(img):
        return img
    out = stack_below(img, caption_strip([RANDOM_LABEL], img.width))
    out.info["nstcam"] = {**img.info["nstcam"], "marked": True}
    return out
