"""What the tabs share on the page: the style sheet, the random-weights banner, sample images, the
size and steps sliders, the image pickers, overlay galleries, and results written to files."""

from __future__ import annotations

from typing import Any

import gradio as gr
from PIL import Image

from nstcam._mark import mark_height, tag_weights
from nstcam.app.config import AppConfig
from nstcam.app.disk.files import Outbox
from nstcam.app.guard.inputs import SafeImage, load_upload
from nstcam.image import SAMPLES

__all__ = ["CSS", "RANDOM_BANNER", "as_files", "before_after", "gallery", "pickers", "sample", "size_steps"]

RANDOM_BANNER = (
    "⚠️ **Random weights** — this server runs with seeded random weights (offline/test mode). "
    "Stylised images and Grad-CAM maps are **not meaningful**."
)

CSS = """
/* results and previews fill their panel whatever their pixel size (a 64 px result is not a strip) */
#st-result .image-frame, #sa-result .image-frame, #vid-preview .image-frame { width: 100% !important; }
#st-result img, #sa-result img, #vid-preview img {
    width: 100% !important; height: auto !important; max-height: 420px; object-fit: contain !important;
}
/* the feature-map grid: its first row's captions below the label badge and the toolbar, not under them */
#fm-grid .image-container { padding-top: 44px; }
/* galleries of overlays: whole images at their own aspect, the caption below the image, no blank band */
.nst-gallery .grid-wrap { min-height: 0 !important; height: auto !important; max-height: none !important; }
.nst-gallery .gallery-item { height: auto !important; }
.nst-gallery .thumbnail-item {
    aspect-ratio: auto !important; height: auto !important; display: flex; flex-direction: column;
}
.nst-gallery .thumbnail-item img { height: auto !important; width: 100%; object-fit: contain !important; }
.nst-gallery .caption-label {
    position: static !important; white-space: normal; overflow: visible; text-overflow: clip;
    max-width: none !important; transform: none !important; margin: 0 !important;
}
"""


def gallery(label: str, elem_id: str) -> gr.Gallery:
    """An overlay gallery: whole images (never cropped, not opened in a preview), captions below."""
    return gr.Gallery(
        label=label,
        columns=3,
        height="auto",
        object_fit="contain",
        allow_preview=False,
        elem_id=elem_id,
        elem_classes=["nst-gallery"],
    )


def as_files(outbox: Outbox, item: Any, saved: dict[int, tuple[Image.Image, str]] | None = None) -> Any:
    """Every PIL image in a handler's output written to a file of its own.

    Gradio would save a returned PIL image under a name derived from its content, so two requests
    with the same result would write and serve one file at once (0-byte downloads under load).
    ``saved`` (one per request) writes an image object that comes again (the preview repeated at
    each step until the next) only once.
    """
    if isinstance(item, Image.Image):
        if saved is None:
            return outbox.save(item, "image.png")
        if id(item) not in saved:
            saved[id(item)] = (item, outbox.save(item, "image.png"))  # the image kept: its id stays its own
        return saved[id(item)][1]
    if isinstance(item, tuple):
        return tuple(as_files(outbox, x, saved) for x in item)
    if isinstance(item, list):
        return [as_files(outbox, x, saved) for x in item]
    return item


def sample(name: str) -> str:
    return str(SAMPLES / name)


def before_after(outbox: Outbox, content: str | None, result: str | None) -> tuple[str, str] | None:
    """The content at the result's size beside the result, for the before/after slider: the same
    picture size and, from random weights, the same label below it (the halves matched in scale)."""
    if not content or not result:
        return None
    after = Image.open(result)
    w, h = after.size
    random = after.info.get("nstcam:random_weights") == "true"
    if random:  # the result carries the label below the picture: the content gets the same one
        h -= mark_height(w)
    before = load_upload(content, "content").resize((w, h), Image.Resampling.LANCZOS)
    return outbox.save(
        tag_weights(before, after.info.get("nstcam:weights", ""), random), "before.png"
    ), result


def first_size_steps(config: AppConfig) -> tuple[int, int]:
    """The size and steps sliders' first values on this server: 384 px and 100 steps, or its limits."""
    return min(384, config.max_size), min(100, config.max_steps)


def size_steps(config: AppConfig) -> tuple[gr.Slider, gr.Slider]:
    # the limits in the labels: a number typed over them is clamped by the browser, so say them
    size = gr.Slider(
        64,
        config.max_size,
        value=first_size_steps(config)[0],
        step=16,
        label=f"Size (long side, px; at most {config.max_size} here)",
    )
    steps = gr.Slider(
        1,
        config.max_steps,
        value=first_size_steps(config)[1],
        step=1,
        label=f"Steps (at most {config.max_steps} here)",
    )
    return size, steps


def pickers(prefix: str, style_label: str) -> tuple[gr.Image, gr.Image]:
    """The content picker (upload, clipboard, webcam) and a style picker, ids ``<prefix>-content``
    and ``<prefix>-style``."""
    content = SafeImage(
        label="Content", sources=["upload", "clipboard", "webcam"], height=200, elem_id=f"{prefix}-content"
    )
    style = SafeImage(
        label=style_label, sources=["upload", "clipboard"], height=200, elem_id=f"{prefix}-style"
    )
    return content, style
