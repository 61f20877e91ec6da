"""A labelled picture strip for the docs: pictures side by side, each captioned, a note below."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from nstcam import save_image
from nstcam._mark import caption_strip, stack_below


def labelled_strip(cells: list[tuple[Image.Image, str]], note: str, path: Path) -> None:
    """``cells`` (picture, caption), all one height, side by side 8 px apart, ``note`` under them,
    written to ``path``."""
    shown = [stack_below(img.convert("RGB"), caption_strip([text], img.width, 40)) for img, text in cells]
    strip = Image.new("RGB", (sum(i.width for i in shown) + 8 * (len(shown) - 1), shown[0].height), "white")
    x = 0
    for img in shown:
        strip.paste(img, (x, 0))
        x += img.width + 8
    save_image(stack_below(strip, caption_strip([note], strip.width)), path)
