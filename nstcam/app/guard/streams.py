"""A live stream (the Webcam tab) as a stranger would use it: a few streams at once, one per client,
each ended when its client goes away, each frame's header checked before it is decoded.

Gradio queues each stream as one event that holds its place for the stream's time limit, and its
queue has one size for everything: 33 idle streams (one 64 px frame each) made every endpoint answer
HTTP 503 "Queue is full" to everyone, and a disconnected stream kept the one webcam slot for its
120 s. And a frame is a ``data:`` URL that Gradio decodes whole: a 492 KB PNG of 13000 x 13000 px
sent as a frame took +2.25 GB before the handler's size check.

- :func:`stream_refusal` (applied by :class:`nstcam.app.guard.fair.QueueLimits`): a queue request
  for a stream event is refused (HTTP 429, one line) where :data:`MAX_STREAMS` streams are already
  queued or running, or its client already has :data:`MAX_STREAMS_PER_CLIENT`; the rest of the
  queue stays free for the other endpoints.
- :func:`close_session_streams`: when a session's event stream closes (a closed tab, a client gone),
  its streams end at once (running: as Gradio's own ``/stream/<id>/close`` ends them; waiting: taken
  out of the queue).
- :func:`SafeFrame`: the streaming image input; a frame's size is read from its header (nothing
  decoded) and held to the server's frame cap. Gradio keeps only a stream's latest frame (each one
  sent replaces the last): a server behind drops frames, never queues them.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import warnings
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image, UnidentifiedImageError

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.errors import refuse
from nstcam.app.guard.quota import client_of

__all__ = [
    "MAX_FRAME_CHARS",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_CLIENT",
    "SafeFrame",
    "close_session_streams",
    "frame_size",
    "is_stream_fn",
    "mark_stream",
    "stream_refusal",
]

logger = logging.getLogger("nstcam.app")

MAX_STREAMS = 4
"""Streams queued or running at once on this server (one paints, the others wait): the queue's
other places stay free for every other endpoint."""
MAX_STREAMS_PER_CLIENT = 1
"""Streams one client may have queued or running."""
MAX_FRAME_CHARS = 1024 * 1024
"""Characters of one frame's ``data:`` URL (a request's body cap: a 640 x 480 JPEG is about 60 KB)."""


def mark_stream(fn: Any) -> Any:
    """Tags a stream event's function: its queue requests are held to :func:`stream_refusal`."""
    fn.nstcam_stream = True
    return fn


def is_stream_fn(fn: Any) -> bool:
    """Whether an event's function (a ``BlockFunction``'s ``fn``) is a stream's (:func:`mark_stream`)."""
    return bool(getattr(fn, "nstcam_stream", False))


def _is_stream(event: Any) -> bool:
    return is_stream_fn(getattr(event.fn, "fn", None)) and not event.closed


def stream_refusal(scope: dict[str, Any], block_fn: Any) -> str | None:
    """Why a queue request for the event ``block_fn`` (Gradio's ``BlockFunction``) cannot join (one
    line), or None: only stream events are held, to :data:`MAX_STREAMS` in all and
    :data:`MAX_STREAMS_PER_CLIENT` per client."""
    if block_fn is None or not is_stream_fn(block_fn.fn):
        return None
    app = scope.get("app")
    blocks = app.get_blocks() if hasattr(app, "get_blocks") else None
    streams = [e for e in gradio_internals.queued_events(blocks) if _is_stream(e)]
    client = client_of(scope)
    mine = sum(1 for e in streams if client_of(getattr(e.request, "scope", {}) or {}) == client)
    if mine >= MAX_STREAMS_PER_CLIENT:
        return (
            f"one client may have at most {MAX_STREAMS_PER_CLIENT} webcam stream on this server; "
            "stop the other one first"
        )
    if len(streams) >= MAX_STREAMS:
        return (
            f"this server paints at most {MAX_STREAMS} webcam streams at once (queued included); "
            "try again soon"
        )
    return None


def close_session_streams(scope: dict[str, Any], session: str) -> int:
    """Ends the streams of ``session`` (its client went away): running ones as Gradio's own close
    does, waiting ones taken out of the queue; returns how many."""
    app = scope.get("app")
    blocks = app.get_blocks() if hasattr(app, "get_blocks") else None
    if gradio_internals.queue_of(blocks) is None or not session:
        return 0
    closed = 0
    for event in gradio_internals.queued_events(blocks):
        if event.session_hash != session or not _is_stream(event):
            continue
        gradio_internals.end_event(event)
        gradio_internals.drop_waiting(blocks, event)
        closed += 1
    if closed:
        logger.info("a closed event stream: ended %d webcam stream(s) at once", closed)
    return closed


def frame_size(data_url: str, name: str = "frame") -> tuple[int, int]:
    """A ``data:image/...;base64,`` frame's ``(width, height)`` from its header (nothing decoded)."""
    head, _, payload = data_url.partition(",")
    if not head.startswith("data:image/") or not head.endswith(";base64") or not payload:
        raise refuse(f"{name} must be an image as a base64 data: URL")
    if len(data_url) > MAX_FRAME_CHARS:
        raise refuse(
            f"{name} may be at most {MAX_FRAME_CHARS:,} characters on this server, got {len(data_url):,}"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused by its size below
            with Image.open(io.BytesIO(base64.b64decode(payload, validate=False))) as img:
                return img.size
    except Image.DecompressionBombError:
        raise refuse(f"{name} holds more pixels than any webcam frame on this server") from None
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError):
        raise refuse(f"{name} is not an image nstcam reads (PNG, JPEG or WebP)") from None


def SafeFrame(max_pixels: int, **kwargs: Any) -> gr.Image:  # noqa: N802 - reads like the component it builds
    """A streaming ``gr.Image`` (webcam) whose every frame's header is checked against ``max_pixels``
    (width x height) and 8 px a side before Gradio decodes it; hands the handler an RGB array."""
    comp = gr.Image(sources=["webcam"], streaming=True, type="numpy", **kwargs)
    gradio_internals.install(comp, "preprocess", lambda original: _checked_frames(original, max_pixels))
    return comp


def _checked_frames(gradio_preprocess: Any, max_pixels: int) -> Any:
    def preprocess(payload: Any) -> np.ndarray | None:
        url = getattr(payload, "url", None)
        if payload is None:
            return None
        if not isinstance(url, str) or not url.startswith("data:"):
            raise refuse("frame must be a webcam frame (a base64 data: URL)")
        w, h = frame_size(url)
        if w * h > max_pixels or min(w, h) < 8:
            raise refuse(
                f"frame is {w}x{h} px; at most {max_pixels / 1e6:.1f} MP and 8 px a side on this server"
            )
        return gradio_preprocess(payload)

    return preprocess
