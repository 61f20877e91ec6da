"""Grad-CAM over time: a clip in, per-frame maps, the class score over time and an explained clip out.

A video classifier (:data:`nstcam.cam.VIDEO_ARCHS`, or any model of 3D convolutions) sees windows
of ``cam.frames`` frames, ``stride`` apart; the last window ends on the last frame, so every frame
is seen, and a clip shorter than a window is padded with its last frame. Each window's raw map
(t, h, w) is stretched over its frames (linear in time) and placed back; where windows overlap,
their maps and scores are blended with a tent weight (a window's middle counts most). An image
classifier explains the clip frame by frame, with optional temporal smoothing of its maps
(``smooth``: a centred moving average over that many frames on each side).

Three passes read the clip, each decoding one frame at a time, so memory is bounded by one window,
never by the clip: (1) without ``target``/``classes``, one forward pass per window finds the clip's
top classes (the mean of the windows' probabilities); (2) one forward pass and one backward pass per
class per window give the maps and the score of each class over time; (3) with ``output`` or
``contact_sheet``, the frames are read once more and drawn. The maps are kept at the layer's
resolution ((frames, h, w) per class: 300 frames of a 7 x 7 grid are 59 KB), scaled once over the
whole clip, so a frame's heat is comparable with every other frame's.

Clips reach FFmpeg only through :mod:`nstcam.video` (an allow-list of containers, no protocols, the
frame-size limit before any decoding; ``max_seconds`` and ``max_frame_pixels`` as the Video tab's).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from nstcam._checks import StoppedEarly, whole
from nstcam._files import atomic_file
from nstcam._mark import MIN_FONT, RANDOM_LABEL, caption_strip, stack_below, tag_weights
from nstcam.cam._maps import resize_grid, upsample_maps
from nstcam.cam.overlay import overlay_heatmap
from nstcam.image import save_image

if TYPE_CHECKING:
    from nstcam.video.source import VideoInfo

__all__ = ["ClipClass", "VideoCamResult", "clip_windows", "explain_video", "score_text", "window_starts"]

logger = logging.getLogger(__name__)

MAX_TOP_K = 10
SHEET_COLUMNS = 8


def window_starts(frames: int, length: int, stride: int) -> list[int]:
    """First frames of the windows over a clip of ``frames``: 0, stride, 2 stride... and one that
    ends on the last frame, so every frame is seen (a clip shorter than a window: one window)."""
    last = max(0, frames - length)
    starts = list(range(0, last + 1, stride))
    if starts[-1] != last:
        starts.append(last)
    return starts


def tent(length: int) -> np.ndarray:
    """A window's blending weights: its middle frames count most, its ends least (never 0)."""
    i = np.arange(length, dtype=np.float64)
    return np.minimum(i + 1, length - i)


@dataclass
class ClipClass:
    """One class explained over a clip.

    Attributes:
        index: the class; label: its name.
        score: its mean probability over the windows.
        window_scores: its probability in each window (``VideoCamResult.windows``).
        frame_scores: its probability at each frame (the windows' scores blended, tent-weighted).
        maps: (frames, h, w) in [0, 1] at the layer's grid, scaled over the whole clip (1 is the
            clip's strongest evidence), blended over windows.
        peak: (first, last) frame of the window where the class is strongest.
        faithfulness: with ``evaluate``, on that window (the model's input, over space and time):
            ``deletion_auc`` and ``insertion_auc`` of the map, and ``random_deletion_auc`` and
            ``random_insertion_auc`` of a random map on the map's own grid, upsampled as it is.
    """

    index: int
    label: str
    score: float
    window_scores: np.ndarray = field(repr=False)
    frame_scores: np.ndarray = field(repr=False)
    maps: np.ndarray = field(repr=False)
    peak: tuple[int, int] = (0, 0)
    faithfulness: dict[str, float] | None = None

    def frame_map(self, i: int, size: tuple[int, int]) -> np.ndarray:
        """Frame ``i``'s map at ``size`` (width, height), bilinear, in [0, 1]."""
        m = torch.from_numpy(self.maps[i][None, None].astype(np.float32))
        return resize_grid(m, (size[1], size[0]))[0, 0].clamp(0, 1).numpy()

    @property
    def peak_frame(self) -> int:
        """The frame where the class's score over time is highest."""
        return int(np.argmax(self.frame_scores))


@dataclass
class VideoCamResult:
    """A clip explained.

    Attributes:
        name: the clip's name (never a server path); frames: frames explained; fps: their rate.
        windows: (first, last) frame of each window (an image model: each frame alone).
        classes: one :class:`ClipClass` per class explained, highest score first.
        window: frames per window (1: an image model, frame by frame).
        output, contact_sheet, csv: the files written, or None.
        notice: the weights' one line (random weights say so); random_weights: whether they are.
    """

    name: str
    frames: int
    fps: float
    windows: list[tuple[int, int]]
    classes: list[ClipClass]
    window: int
    output: Path | None = None
    contact_sheet: Path | None = None
    csv: Path | None = None
    notice: str = ""
    random_weights: bool = False

    def times(self) -> np.ndarray:
        """Each frame's time in seconds."""
        return np.arange(self.frames) / self.fps


class _Stop(Exception):  # noqa: N818 - control flow: the caller's progress callback asked to stop
    pass


def explain_video(
    cam: Any,
    clip: str | os.PathLike,
    *,
    top_k: int = 1,
    target: int | None = None,
    classes: list[int] | None = None,
    stride: int | None = None,
    smooth: int = 0,
    output: str | os.PathLike | None = None,
    contact_sheet: str | os.PathLike | None = None,
    csv_path: str | os.PathLike | None = None,
    name: str | None = None,
    max_seconds: float | None = None,
    max_frame_pixels: int | None = None,
    max_pixels: int | None = None,
    max_frames: int | None = None,
    trim: bool = False,
    progress: Callable[[int, int], Any] | None = None,
    evaluate: bool = False,
    evaluate_steps: int = 10,
) -> VideoCamResult:
    """Explains a clip with the engine ``cam`` (a :class:`nstcam.GradCAM`), as the module says.

    Args:
        clip: a video file (mp4, webm, mov, mkv, GIF...), a folder / glob of frames, or a clip
            :func:`nstcam.video.probe_video` has already probed (as ``stylize_video`` takes it).
        top_k: the clip's top classes to explain (its mean probability over windows).
        target: explain this class; classes: explain these (both replace ``top_k``).
        stride: frames between windows' starts (default half a window; an image model: 1).
        smooth: average each frame's maps with this many frames on each side (0: none).
        output: the overlay clip (.mp4, .webm... or a folder of PNG frames), the first class's heat
            over each frame with its label and score drawn, the source's audio carried over.
        contact_sheet: a PNG of 8 frames evenly spread (the peak frame among them), one row per class.
        csv_path: a CSV of each window's frames, times and each class's probability.
        name: how messages call the clip (default: its file name).
        max_seconds, max_frame_pixels, max_frames, trim: a server's limits
            (:func:`nstcam.video.check_limits`; ``max_frames`` bounds the windows planned, whatever
            the frame rate); max_pixels: the largest frame, every frame (default the image limit,
            40 MP).
        progress: ``progress(done, total)`` after each window of each pass; returning False stops
            (a ``ValueError`` saying it was cancelled, no file left behind).
        evaluate: measure each class's map on its strongest window: deletion and insertion over
            space and time (:func:`nstcam.metrics.deletion_auc`, voxels removed to 0 / inserted into
            a per-frame blur) beside a random map's; ``evaluate_steps``: the curves' points less one.
            Costs ``4 * (evaluate_steps + 1)`` forward passes of a window per class.

    Returns:
        A :class:`VideoCamResult`.

    Raises:
        nstcam.video.VideoError: a clip that cannot be read or is over a limit (the message names it).
        ValueError: a bad argument, named.
    """
    from nstcam.video.source import VideoInfo, check_limits, probe_video  # PyAV only when a clip comes

    top_k = whole("top_k", top_k, minimum=1, maximum=MAX_TOP_K)
    smooth = whole("smooth", smooth, minimum=0, maximum=100)
    steps = whole("evaluate_steps", evaluate_steps, minimum=1, maximum=100)
    chosen = _chosen(target, classes, cam)
    if isinstance(clip, VideoInfo):
        info = clip
    else:
        limits = {} if max_pixels is None else {"max_pixels": max_pixels}
        info = probe_video(clip, name=name or Path(os.fspath(clip)).name, max_frames=max_frames, **limits)
    frames = check_limits(
        info, max_seconds=max_seconds, max_frame_pixels=max_frame_pixels, max_frames=max_frames, trim=trim
    )
    length = cam.frames or 1
    stride = whole("stride", stride if stride is not None else max(1, length // 2), minimum=1, maximum=length)
    starts = window_starts(frames, length, stride)
    passes = (0 if chosen else 1) + 1 + (1 if output or contact_sheet else 0)
    tick = _Ticker(progress, passes * len(starts))
    if not chosen:
        chosen = _top_classes(cam, info, frames, starts, length, top_k, tick)
    result = _explain(cam, info, frames, starts, length, chosen, smooth, tick)
    if evaluate:
        peaks: dict[int, torch.Tensor] = {}  # each strongest window decoded once, whatever its classes
        for c in result.classes:
            if c.peak[0] not in peaks:
                (peaks[c.peak[0]],) = _windows(cam, info, frames, [c.peak[0]], length)
            c.faithfulness = _faithfulness(cam, peaks[c.peak[0]], c, steps)
    result.notice = cam.weights.notice if cam.weights is not None else ""
    result.random_weights = bool(cam.weights is not None and cam.weights.is_random)
    if csv_path is not None:
        result.csv = _write_csv(result, Path(csv_path))
    if output or contact_sheet:
        _draw(cam, info, result, output, contact_sheet, tick)
    return result


def clip_windows(
    cam: Any, clip: str | os.PathLike, count: int = 4, *, max_frames: int | None = None
) -> list[torch.Tensor]:
    """``count`` windows spread evenly over a clip (first to last), each as the network takes it:
    ``(C, T, H, W)`` for a clip model, one frame ``(C, H, W)`` for an image model. The inputs of
    :meth:`nstcam.GradCAM.trust` for a clip (``nstcam cam clip.mp4 --trust``).

    Raises:
        nstcam.video.VideoError: a clip that cannot be read or is over ``max_frames``, named.
    """
    from nstcam.video.source import check_limits, probe_video

    count = whole("count", count, minimum=1, maximum=64)
    info = probe_video(clip, name=Path(os.fspath(clip)).name, max_frames=max_frames)
    frames = check_limits(info, max_frames=max_frames)
    length = cam.frames or 1
    spread = np.linspace(0, max(0, frames - length), count).round().astype(int)
    starts = sorted({int(v) for v in spread})
    return [x[0] for x in _windows(cam, info, frames, starts, length)]


def _chosen(target: int | None, classes: list[int] | None, cam: Any) -> list[int]:
    if target is not None and classes is not None:
        raise ValueError("give target or classes, not both")
    picked = [target] if target is not None else list(classes or [])
    if len(picked) > MAX_TOP_K:
        raise ValueError(f"classes: at most {MAX_TOP_K} classes, got {len(picked)}")
    n = len(cam.categories)
    return [whole("target" if target is not None else "classes", c, minimum=0, maximum=n - 1) for c in picked]


class _Ticker:
    """Counts windows done over every pass and asks the caller whether to go on."""

    def __init__(self, progress: Callable[[int, int], Any] | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self) -> None:
        self.done += 1
        if self.progress is not None and self.progress(self.done, self.total) is False:
            raise StoppedEarly(f"cancelled after {self.done} of {self.total} windows")


def _windows(
    cam: Any, info: VideoInfo, frames: int, starts: list[int], length: int
) -> Iterator[torch.Tensor]:
    """Each window as the model's input (1, 3, T, H, W) (an image model: (1, 3, H, W)), decoding
    one frame at a time and keeping one window's frames."""
    from nstcam.video.source import read_frames

    buffer: list[torch.Tensor] = []
    first = 0  # the clip's frame number of buffer[0]
    source = read_frames(info, frames)
    for s in starts:
        while first + len(buffer) < min(s + length, frames):
            buffer.append(cam.preprocess(Image.fromarray(next(source)))[0])
        drop = s - first
        del buffer[:drop]
        first = s
        window = buffer[: min(length, frames - s)]
        window = window + [window[-1]] * (length - len(window))  # a clip shorter than a window
        if cam.frames is None:
            yield window[0][None]
        else:
            yield torch.stack(window, dim=1)[None]


def _top_classes(cam, info, frames, starts, length, top_k, tick) -> list[int]:
    total = None
    for x in _windows(cam, info, frames, starts, length):
        p = cam.predict(x)[0].double()
        total = p if total is None else total + p
        tick()
    return [int(c) for c in total.topk(min(top_k, total.numel())).indices]


def _explain(cam, info, frames, starts, length, chosen, smooth, tick) -> VideoCamResult:
    k = len(chosen)
    weights = tent(length)
    sums: np.ndarray | None = None
    norm = np.zeros(frames)
    scored = np.zeros((k, frames))
    window_scores = np.zeros((k, len(starts)))
    for w, (s, x) in enumerate(zip(starts, _windows(cam, info, frames, starts, length), strict=True)):
        raws, probs = cam.class_maps(x, chosen)  # (k, 1, *grid)
        raw = raws[:, 0].float()
        if cam.frames is not None:  # (k, t, h, w) stretched over the window's frames
            raw = resize_grid(raw[:, None], (length, *raw.shape[-2:]))[:, 0]
        else:
            raw = raw[:, None]
        n = min(length, frames - s)
        if sums is None:
            sums = np.zeros((k, frames, *raw.shape[-2:]))
        wt = weights[:n]
        sums[:, s : s + n] += raw[:, :n].cpu().double().numpy() * wt[None, :, None, None]
        norm[s : s + n] += wt
        p = probs[0, chosen].cpu().double().numpy()
        window_scores[:, w] = p
        scored[:, s : s + n] += p[:, None] * wt[None]
        tick()
    maps = sums / norm[None, :, None, None]
    if smooth:
        maps = _moving_average(maps, smooth)
    top = maps.reshape(k, -1).max(1)
    maps = maps / np.where(top > 0, top, 1)[:, None, None, None]
    frame_scores = scored / norm[None]
    windows = [(s, min(s + length, frames) - 1) for s in starts]
    result = []
    for j, c in enumerate(chosen):
        best = int(np.argmax(window_scores[j]))
        result.append(
            ClipClass(
                c,
                cam.label(c),
                float(window_scores[j].mean()),
                window_scores[j],
                frame_scores[j],
                maps[j].astype(np.float32),
                windows[best],
            )
        )
    result.sort(key=lambda r: -r.score)
    return VideoCamResult(info.name, frames, info.fps, windows, result, length)


def _faithfulness(cam: Any, x: torch.Tensor, c: ClipClass, steps: int) -> dict:
    """Deletion and insertion of class ``c``'s map on its strongest window ``x``, beside a random map's."""
    from nstcam.metrics import deletion_auc, insertion_auc

    x = x.to(cam.device)
    raws, _ = cam.class_maps(x, [c.index])
    grid = tuple(x.shape[2:])
    ours = upsample_maps(raws[0].float(), grid)
    gen = torch.Generator().manual_seed(0)
    chance = upsample_maps(torch.rand(raws[0].shape, generator=gen).to(x.device), grid)
    out = {}
    for name, m in (("", ours), ("random_", chance)):
        out[f"{name}deletion_auc"] = float(deletion_auc(cam.model, x, m, c.index, steps=steps)[0])
        out[f"{name}insertion_auc"] = float(
            insertion_auc(cam.model, x, m, c.index, steps=steps, baseline="blur")[0]
        )
    return out


def _moving_average(maps: np.ndarray, radius: int) -> np.ndarray:
    """A centred moving average over time (axis 1), over the frames that exist at the ends."""
    c = np.cumsum(np.pad(maps, ((0, 0), (1, 0), (0, 0), (0, 0))), axis=1)
    n = maps.shape[1]
    lo = np.clip(np.arange(n) - radius, 0, n)
    hi = np.clip(np.arange(n) + radius + 1, 0, n)
    return (c[:, hi] - c[:, lo]) / (hi - lo)[None, :, None, None]


def _write_csv(result: VideoCamResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, ".csv") as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        out = csv.writer(text)
        out.writerow(
            ["window", "first_frame", "last_frame", "start_s", "end_s", *(c.label for c in result.classes)]
        )
        for w, (a, b) in enumerate(result.windows):
            scores = [f"{c.window_scores[w]:.6f}" for c in result.classes]
            out.writerow([w, a, b, f"{a / result.fps:.3f}", f"{(b + 1) / result.fps:.3f}", *scores])
        text.flush()
        text.detach()
    return path


def score_text(score: float) -> str:
    """A probability as a person reads it: two decimals from 0.1 up, two significant digits below
    (``0.87``, ``0.0041``; never a flat ``0.00``)."""
    return f"{score:.2f}" if score >= 0.1 else f"{score:.2g}"


def _lines(c: ClipClass, i: int, fps: float) -> list[str]:
    return _caption_lines(c.label, score_text(c.frame_scores[i]), i / fps)


def _caption_lines(label: str, score: str, seconds: float) -> list[str]:
    return [f"{label} {score}", f"{seconds:.2f} s"]


def _captioned(img: Image.Image, lines: list[str], height: int, max_font: int | None = None) -> Image.Image:
    """``img`` with ``lines`` in a margin below it (never over the frame), ``height`` px at least."""
    return stack_below(img, caption_strip(lines, img.width, height, max_font))


def frame_font(height: int) -> int:
    """The largest caption text under an explained clip's frame ``height`` px tall: a twentieth of
    it (a 320 x 240 frame's caption took 76 px, a third of the frame, at the width's size alone)."""
    return max(MIN_FONT, height // 20)


def _frame_lines(c: ClipClass, i: int, fps: float) -> list[str]:
    """An overlay frame's caption: its label, score and time on one line."""
    return [" · ".join(_lines(c, i, fps))]


def _caption_height(
    result: VideoCamResult, width: int, random: bool, max_font: int | None = None, joined: bool = False
) -> int:
    """The tallest caption any frame of any class gets at ``width`` (each class with its longest
    score text, at the last frame's time): one height for the whole clip, so no frame's is cut;
    ``joined``: the overlay's captions, on one line."""
    said = [RANDOM_LABEL] if random else []
    last = (result.frames - 1) / result.fps
    longest = {c.label: max((score_text(v) for v in c.frame_scores), key=len) for c in result.classes}
    lines = [_caption_lines(label, score, last) for label, score in longest.items()]
    lines = [[" · ".join(one)] for one in lines] if joined else lines
    return max(caption_strip([*one, *said], width, max_font=max_font).height for one in lines)


def _draw(cam, info, result: VideoCamResult, output, contact_sheet, tick) -> None:
    """Pass 3: the overlay clip (the first class; each frame's label, score and time in a margin
    below it, random weights said there too) and the contact sheet (every class)."""
    from nstcam.video.sink import VideoWriter, even_size
    from nstcam.video.source import read_frames

    said = [RANDOM_LABEL] if result.random_weights else []
    font = frame_font(info.height)
    below = _caption_height(result, info.width, result.random_weights, font, joined=True)
    framed = (info.width, info.height + below)
    if output and even_size(framed, Path(output)) != framed:  # 4:2:0 needs even sides: pad, never cut
        framed = (framed[0] + framed[0] % 2, framed[1] + framed[1] % 2)
    picks = _sheet_frames(result)
    cells: dict[int, list[Image.Image]] = {}
    meta = {"comment": RANDOM_LABEL} if result.random_weights else None
    writer = VideoWriter(output, info.fps, framed, audio_from=info, metadata=meta) if output else None
    per_tick = max(1, math.ceil(result.frames / len(result.windows)))
    try:
        for i, frame in enumerate(read_frames(info, result.frames)):
            img = Image.fromarray(frame)
            if writer is not None:
                first = _frame_overlay(cam, img, result.classes[0], i)
                shown = Image.new("RGB", framed, (0, 0, 0))
                shown.paste(
                    _captioned(first, [*_frame_lines(result.classes[0], i, result.fps), *said], below, font)
                )
                writer.write(shown)
            if i in picks:
                cells[i] = [_frame_overlay(cam, img, c, i) for c in result.classes]
            if (i + 1) % per_tick == 0 or i + 1 == result.frames:
                tick()
        if writer is not None:
            result.output = writer.close()
            writer = None
    finally:
        if writer is not None:
            writer.abort()
    if contact_sheet:
        sheet = tag_weights(_sheet(result, cells, picks), result.notice, result.random_weights)
        result.contact_sheet = save_image(sheet, contact_sheet)  # random weights: marked below it


def _frame_overlay(cam, img: Image.Image, c: ClipClass, i: int) -> Image.Image:
    """Frame ``i`` with class ``c``'s heat."""
    return overlay_heatmap(img, c.frame_map(i, img.size), colormap=cam.colormap, alpha=cam.alpha)


def _sheet_frames(result: VideoCamResult) -> list[int]:
    """:data:`SHEET_COLUMNS` frames evenly over the clip, the one nearest the first class's strongest
    frame moved onto it (the sheet had a ninth, unevenly timed column before)."""
    n = min(SHEET_COLUMNS, result.frames)
    picks = sorted({round(float(v)) for v in np.linspace(0, result.frames - 1, n)})
    peak = result.classes[0].peak_frame
    if peak not in picks:
        picks[min(range(len(picks)), key=lambda k: abs(picks[k] - peak))] = peak
    return sorted(set(picks))


def _sheet(result: VideoCamResult, cells: dict[int, list[Image.Image]], picks: list[int]) -> Image.Image:
    """The contact sheet: one column per picked frame, one row per class, at most 160 px a cell, each
    cell's label, score and time in a margin below it, wrapped to the cell's width."""
    first = cells[picks[0]][0]
    scale = min(1.0, 160 / max(first.size))
    w, h = max(1, round(first.width * scale)), max(1, round(first.height * scale))
    below = _caption_height(result, w, False)
    sheet = Image.new("RGB", (w * len(picks), (h + below) * len(result.classes)), (0, 0, 0))
    for col, i in enumerate(picks):
        for row, (c, cell) in enumerate(zip(result.classes, cells.get(i, []), strict=False)):
            small = cell.resize((w, h), Image.Resampling.BILINEAR)
            sheet.paste(_captioned(small, _lines(c, i, result.fps), below), (col * w, row * (h + below)))
    return sheet
