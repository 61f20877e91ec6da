"""Stylising a clip with temporal consistency (Ruder, Dosovitskiy, Brox 2016, "Artistic style
transfer for videos"), on any engine with :meth:`nstcam.StyleTransfer.stylize`'s API.

Frame ``t`` starts from the stylised frame ``t - 1`` warped by the optical flow (pixels whose motion
is uncertain start from the frame itself) and is optimised with an extra loss, a
:class:`~nstcam.PixelAnchor`: ``temporal_weight`` x the masked mean squared difference to that
warped frame, the mask being the flow's certainty (0 where pixels were occluded or disoccluded and on
motion boundaries). ``temporal_weight=0`` is the per-frame baseline. ``passes > 1`` adds Ruder's
multi-pass refinement: alternately backward and forward in time, every frame is optimised a few
steps more against both neighbours.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from nstcam._checks import finite, whole
from nstcam._mark import RANDOM_LABEL, caption_strip
from nstcam._terminal import watching
from nstcam.anchor import PixelAnchor
from nstcam.image import ImageSource, long_side_size
from nstcam.video.flow import FlowEstimator
from nstcam.video.sink import VideoWriter, even_size
from nstcam.video.source import VideoInfo, probe_video, read_frames, to_image
from nstcam.video.warping import certainty, pair_error, warp

__all__ = ["DEFAULT_TEMPORAL_WEIGHT", "FrameInfo", "VideoResult", "stylize_video"]

logger = logging.getLogger(__name__)

DEFAULT_TEMPORAL_WEIGHT = 50.0
TEMPORAL_WEIGHT_RANGE = (0.0, 1000.0)
"""The temporal weights the app offers (its slider, its check, its API description: one source)."""
"""Weight of the temporal loss next to content 1 and style 50. ``tests/benchmarks/bench_video.py``:
at 50 the frames keep the baseline's style loss and the warping error falls to about 0.1x; at 100
and above the style loss creeps up frame by frame (the frames hold on to their predecessors)."""


class _Engine(Protocol):  # what stylize_video needs of an engine: StyleTransfer's public API
    weights: Any

    def stylize(self, content: ImageSource, style: Any, **params: Any) -> Image.Image: ...

    def stylize_many(self, contents: list, style: Any, **params: Any) -> list[Image.Image]: ...


@dataclass
class FrameInfo:
    """What the progress callback receives: after each reporting step of a frame, and once more when
    the frame is done (``done=True``, ``preview`` = the stylised frame).

    Attributes:
        frame: the frame being stylised (1-based), in the current pass.
        frames: frames in the clip (after ``max_frames``).
        pass_index: the pass (1-based; ``passes > 1`` only goes past 1).
        step: evaluations done in this frame.
        steps: evaluations per frame in this pass.
        losses: the frame's latest losses (``total``, ``content``, ``style``, ``tv``, ``anchor``).
        preview: the frame's image when ``done`` (or the engine's preview), else None.
        done: the frame is finished.
        elapsed: seconds since the clip started.
    """

    frame: int
    frames: int
    pass_index: int
    step: int
    steps: int
    losses: dict[str, float]
    preview: Image.Image | None
    done: bool
    elapsed: float


@dataclass
class VideoResult:
    """A stylised clip.

    Attributes:
        path: the video file or folder written.
        frames: frames written (fewer than the clip's after a cancel).
        fps: frame rate written.
        size: (width, height) of the frames (random weights: the file's frames are taller, the
            label's margin below each).
        warping_error: flicker, the mean over frame pairs of the masked squared difference between
            each output frame and the previous one warped by the input's motion (Lai et al. 2018;
            :func:`nstcam.video.warping_error`); None where it is not measured: fewer than two
            frames, or RAFT on random weights (its flows mean nothing, and its certainty masks
            leave no pixel to compare: the figure would read 0, as if perfectly steady).
            :attr:`warping_error_text` says it for people.
        histories: each frame's loss history (its last pass) as columns: ``{"total": array of one
            value per step, "content": ..., "style": ..., "tv": ..., "anchor": ...}`` (float32, a
            few KB a frame, so that a long clip's histories stay small).
        seconds: wall time of the whole call.
        cancelled: the progress callback stopped the run; ``path`` holds the frames done.
        random_weights: the engine (or RAFT) runs on random weights: the result is not meaningful.
        weights: the engine's weights notice.
        params: the parameters used.
    """

    path: Path
    frames: int
    fps: float
    size: tuple[int, int]
    warping_error: float | None
    histories: list[dict[str, np.ndarray]] = field(repr=False)
    seconds: float
    cancelled: bool = False
    random_weights: bool = False
    weights: str = ""
    params: dict[str, Any] = field(default_factory=dict, repr=False)
    flow_random: bool = False

    @property
    def warping_error_text(self) -> str:
        """The warping error as people read it: three significant digits (``1.28e-06``, never
        ``0.000``), or ``n/a`` and why it is not measured."""
        if self.warping_error is not None:
            return f"{self.warping_error:.3g}"
        if self.flow_random:
            return "n/a (not measured: the RAFT flow has random weights)"
        return "n/a (one frame)"


class _Stop(Exception):  # noqa: N818 - control flow: the user's callback asked to stop
    pass


def _check(passes: int, temporal_weight: float, params: dict[str, Any]) -> None:
    whole("passes", passes, minimum=1)
    finite("temporal_weight", temporal_weight, minimum=0)
    for k in ("init", "anchors", "progress_bar", "preview_every", "scales"):
        if k in params:
            raise ValueError(f"stylize_video sets {k} itself; leave it out")


def stylize_video(
    engine: _Engine,
    video: str | os.PathLike | VideoInfo,
    style: ImageSource | Sequence[ImageSource],
    output: str | os.PathLike,
    *,
    size: int = 512,
    steps: int = 100,
    temporal_weight: float = DEFAULT_TEMPORAL_WEIGHT,
    flow: str | FlowEstimator = "dis",
    passes: int = 1,
    batch_frames: int = 1,
    long_term: Sequence[int] = (1,),
    max_frames: int | None = None,
    fps: float | None = None,
    seed: int | None = 0,
    progress: Callable[[FrameInfo], bool | None] | None = None,
    progress_bar: bool | None = None,
    name: str | None = None,
    **params: Any,
) -> VideoResult:
    """Stylises ``video`` with ``style`` into ``output``, frame by frame, without flicker.

    Args:
        engine: a :class:`nstcam.StyleTransfer` (any object with its ``stylize``).
        video: a video file PyAV decodes (mp4, webm, mov, mkv, animated GIF...), a folder of frames
            or a glob of frames (sorted by name); or what :func:`~nstcam.video.probe_video` returned
            for one (it is not probed again).
        style: one style image, or a list to blend (``style_weights=``).
        output: a video file by extension (``.mp4`` H.264, ``.mov``, ``.mkv``, ``.webm`` VP9,
            ``.gif``) with the input's frame rate and audio; or a folder: one PNG per frame.
        size: long side of the frames, px (H.264/VP9 round each side down to even).
        steps: evaluations per frame (split evenly over the passes).
        temporal_weight: weight of the temporal loss; 0: every frame on its own (the baseline).
        flow: ``"dis"`` (OpenCV, default), ``"raft"``/``"raft_small"``/``"raft_large"``
            (torchvision, on the engine's device, with the official weights; random ones where the
            engine's are random), or a ready :class:`~nstcam.video.FlowEstimator`.
        passes: 1: one pass forward in time, each frame written when done (memory does not grow
            with the clip). N > 1: Ruder's multi-pass, alternately backward and forward, every frame
            against both neighbours; keeps the clip's frames in memory.
        batch_frames: with ``passes > 1`` (or ``temporal_weight=0``), optimise this many frames per
            network step (``StyleTransfer.stylize_many``; needs ``optimizer="adam"``): the first pass
            stylises every frame on its own, later passes hold each frame to its neighbours from the
            pass before. The GPU's lever; keeps the clip's frames in memory.
        long_term: with ``passes=1``, hold each frame to these earlier frames, e.g. ``(1, 10, 20,
            40)`` (Ruder's long-term consistency: a region that was hidden for a while comes back
            as it was; each earlier frame counts only where no nearer one covers the pixel; 1 is
            always included; the last ``max(long_term)`` frames stay in memory).
        max_frames: stylise only the first N frames.
        fps: frame rate of a folder of frames (default 25); a video keeps its own.
        seed: seed of every frame's optimisation.
        progress: called with a :class:`FrameInfo` on the engine's reporting steps and after each
            frame; return False to stop: the frames done so far are written as a playable clip and
            the result says ``cancelled``.
        progress_bar: a tqdm bar of the frames; None: where a person watches (a terminal).
        name: how messages call the clip (default: its path).
        **params: any other keyword of :meth:`nstcam.StyleTransfer.stylize` (``style_weights``,
            ``preserve_color``, ``optimizer``, ``style_mask``, ``tile``, loss weights...).

    Returns:
        A :class:`VideoResult` (path, frames, fps, warping error, per-frame histories).

    Raises:
        VideoError: the clip cannot be used (not a video, truncated, no frames, mixed frame sizes).
        ValueError: a parameter is out of range.
    """
    t0 = time.perf_counter()
    batch, back_to = _schedule(passes, temporal_weight, batch_frames, long_term, params)
    info, n, dims = opened_clip(video, output, name=name, fps=fps, max_frames=max_frames, size=size)
    est = _estimator(flow, engine)
    per_pass = max(1, whole("steps", steps, minimum=1) // passes)
    call = {**params, "size": max(dims), "steps": per_pass, "seed": seed, "progress_bar": False}
    run = _Run(engine, style, call, info, n, temporal_weight, est, progress, t0)
    marked = bool(engine.weights.is_random or est.is_random)  # said under every frame and in its tags
    writer = VideoWriter(
        output,
        info.fps,
        dims,
        audio_from=info,
        metadata={"comment": RANDOM_LABEL} if marked else None,
        footer=caption_strip([RANDOM_LABEL], dims[0]) if marked else None,
    )
    shown = watching() if progress_bar is None else bool(progress_bar)
    bar = tqdm(total=n * passes, desc="frames", unit="frame", disable=not shown, leave=False)
    _write_frames(run, writer, bar, dims, passes, batch, back_to)
    used = {k: v for k, v in call.items() if k != "progress_bar"}
    used.update(steps=steps, temporal_weight=temporal_weight, flow=est.method, passes=passes)
    used.update(batch_frames=batch, long_term=back_to, frames=n)
    result = _result(run, writer, info, dims, est, marked, used, time.perf_counter() - t0)
    path = result.path
    logger.info(
        "%s: %d frames -> %s, warping error %s", info.name, result.frames, path, result.warping_error_text
    )
    return result


def opened_clip(
    video: str | os.PathLike | VideoInfo,
    output: str | os.PathLike,
    *,
    name: str | None,
    fps: float | None,
    max_frames: int | None,
    size: int,
) -> tuple[VideoInfo, int, tuple[int, int]]:
    """A clip to stylise, checked: its probe (``video`` itself where it is one), how many frames to
    stylise, and the output's frame size (long side ``size``, even where the format needs it).
    Refuses an ``output`` that is the input itself."""
    info = video if isinstance(video, VideoInfo) else probe_video(video, name=name, fps=fps)
    if Path(output).resolve() == info.path.resolve():
        raise ValueError(f"output: {Path(output).name} is the input itself; write the result elsewhere")
    n = info.frames if max_frames is None else min(info.frames, whole("max_frames", max_frames, minimum=1))
    dims = even_size(long_side_size((info.width, info.height), whole("size", size, minimum=16)), output)
    return info, n, dims


def _write_frames(
    run: _Run,
    writer: VideoWriter,
    bar: Any,
    dims: tuple[int, int],
    passes: int,
    batch: int,
    back_to: tuple[int, ...],
) -> None:
    """The clip's frames stylised into ``writer``: one pass frame by frame, or several passes over
    the frames held in memory. A stop keeps the frames done (``run.cancelled``); an error, or a stop
    before the first frame, writes nothing."""
    try:
        frames = (to_image(f, dims) for f in read_frames(run.info, run.n))
        if passes == 1 and batch == 1:
            run.sequential(frames, writer, bar, back_to)
        else:
            run.multipass(list(frames), passes, writer, bar, batch)
    except _Stop:
        run.cancelled = True
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    if writer.frames == 0:
        writer.abort()
        raise ValueError(f"{run.info.name}: cancelled before the first frame was done; nothing was written")


def _schedule(
    passes: int, temporal_weight: float, batch_frames: int, long_term: Sequence[int], params: dict
) -> tuple[int, tuple[int, ...]]:
    """The checked schedule: frames per network step, and the earlier frames each frame is held to."""
    _check(passes, temporal_weight, params)
    batch = whole("batch_frames", batch_frames, minimum=1)
    back_to = tuple(sorted({1, *(whole("long_term", j, minimum=1) for j in long_term)}))
    if back_to != (1,) and (passes > 1 or batch > 1):
        raise ValueError("long_term applies to one pass frame by frame (passes=1, batch_frames=1)")
    if batch > 1 and params.get("optimizer", "lbfgs") != "adam":
        raise ValueError("batch_frames > 1 needs optimizer='adam' (L-BFGS's line search couples the frames)")
    if batch > 1 and passes == 1 and temporal_weight > 0:
        raise ValueError(
            "batch_frames > 1 needs passes >= 2 (or temporal_weight=0): one pass goes frame by frame, "
            "each from the one before"
        )
    return batch, back_to


def _estimator(flow: str | FlowEstimator, engine: _Engine) -> FlowEstimator:
    """``flow`` as an estimator: RAFT beside the engine, on random weights where the engine's are."""
    if isinstance(flow, FlowEstimator):
        return flow
    raft_weights = "random" if engine.weights.is_random else "official"
    return FlowEstimator(flow, weights=raft_weights, device=getattr(engine, "device", None))


def _result(
    run: _Run,
    writer: VideoWriter,
    info: VideoInfo,
    dims: tuple[int, int],
    est: FlowEstimator,
    marked: bool,
    used: dict,
    seconds: float,
) -> VideoResult:
    """The written clip's result: its frames, the mean warping error (none on random flow), the
    per-frame histories and the parameters used."""
    path = writer.close()
    flicker = float(np.mean(run.flicker)) if run.flicker and not est.is_random else None
    return VideoResult(
        path,
        writer.frames,
        info.fps,
        dims,
        flicker,
        run.histories,
        seconds,
        run.cancelled,
        marked,
        run.engine.weights.notice,
        used,
        flow_random=est.is_random,
    )


def _columns(history: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """A run's history (one dict per step) as float32 columns, one per loss."""
    keys = [k for k in (history[0] if history else {}) if k not in ("step", "scale")]
    return {k: np.array([h[k] for h in history], dtype=np.float32) for k in keys}


def _warp_image(image: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """A stylised frame (uint8) brought along ``flow``, as float32 in [0, 255]."""
    return np.clip(warp(image, flow), 0, 255)


def _blend(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``mask * a + (1 - mask) * b`` of (H, W, 3) arrays in [0, 1], as float32."""
    m = mask[..., None]
    return (m * a + (1 - m) * b).astype(np.float32)


class _Run:
    """One clip's stylisation: the frames' loop (sequential or multi-pass), progress and cancel."""

    def __init__(
        self,
        engine: _Engine,
        style: Any,
        call: dict[str, Any],
        info: VideoInfo,
        n: int,
        weight: float,
        flows: FlowEstimator,
        progress: Callable[[FrameInfo], bool | None] | None,
        t0: float,
    ) -> None:
        self.engine, self.style, self.call, self.info, self.n = engine, style, call, info, n
        self.weight, self.flows, self.progress, self.t0 = weight, flows, progress, t0
        self.histories: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        self.flicker: list[float] = []  # the warping error of each frame pair, as frames stream
        self.cancelled = False
        self._stopping = False

    def _report(self, i: int, pass_index: int, step: int, losses: dict, preview: Any, done: bool) -> None:
        if self.progress is None:
            return
        steps = self.call["steps"]
        info = FrameInfo(
            i + 1, self.n, pass_index, step, steps, losses, preview, done, time.perf_counter() - self.t0
        )
        if self.progress(info) is False:
            self._stopping = True

    def frame(
        self, i: int, content: Image.Image, init: np.ndarray | None, anchors: list, p: int
    ) -> np.ndarray:
        """Frame ``i`` stylised (pass ``p``), from ``init`` (float (H, W, 3) in [0, 1]) with ``anchors``."""

        def on_step(s: Any) -> bool:
            self._report(i, p, s.step, s.losses, s.preview, False)
            return not self._stopping

        kw = dict(self.call)
        if init is not None:
            kw["init"] = init
        if anchors:
            kw["anchors"] = anchors
        with self._stoppable():
            img = self.engine.stylize(content, self.style, progress=on_step, **kw)
        return self._finish(i, p, img)

    @contextlib.contextmanager
    def _stoppable(self) -> Iterator[None]:
        """The engine's Cancelled, when our callback asked it to stop, as :class:`_Stop`."""
        try:
            yield
        except RuntimeError:
            if self._stopping:
                raise _Stop from None
            raise

    def _finish(self, i: int, p: int, img: Image.Image) -> np.ndarray:
        """Frame ``i``'s result: its history kept, the progress told it is done."""
        history = img.info["nstcam"]["history"]
        self.histories[i] = _columns(history)
        last = {k: float(v[-1]) for k, v in self.histories[i].items()}
        self._report(i, p, len(history), last, img, True)
        return np.asarray(img)

    def _temporal(self, warped: np.ndarray, mask: np.ndarray) -> PixelAnchor:
        return PixelAnchor(warped / 255.0, mask, self.weight)

    def sequential(
        self, frames: Any, writer: VideoWriter, bar: Any, long_term: tuple[int, ...] = (1,)
    ) -> None:
        """Pass 1 forward in time, each frame written when done. Frame ``t`` is held to frames
        ``t - j`` for each ``j`` of ``long_term`` (Ruder's long-term consistency): each earlier
        frame only where no nearer one already covers the pixel; only the last ``max(long_term)``
        frames are kept."""
        recent: collections.deque = collections.deque(maxlen=max(long_term))  # (input, output), newest last
        for i, content in enumerate(frames):
            cur = np.asarray(content)
            init, anchors, pair, covered = None, [], None, None
            for j in long_term:
                if j > len(recent):
                    break
                prev_in, prev_out = recent[-j]
                fwd, back = self.flows.pair(prev_in, cur)
                mask = certainty(back, fwd)
                if j == 1:
                    pair = (back, mask)
                if self.weight == 0:
                    break
                warped = _warp_image(prev_out, back)
                if j == 1:
                    init = _blend(mask, warped / 255.0, cur / 255.0)
                    covered = mask
                else:  # only what the nearer frames do not cover
                    mask, covered = np.maximum(mask - covered, 0), np.minimum(covered + mask, 1)
                anchors.append(self._temporal(warped, mask))
            out = self.frame(i, content, init, anchors, 1)
            if pair is not None:
                self.flicker.append(pair_error(recent[-1][1], out, *pair))
            writer.write(out)
            bar.update(1)
            if self._stopping:
                raise _Stop
            recent.append((cur, out))

    def multipass(
        self, frames: list[Image.Image], passes: int, writer: VideoWriter, bar: Any, batch: int = 1
    ) -> None:
        """Ruder's multi-pass: a first pass forward (frame by frame as :meth:`sequential`; with
        ``batch > 1``, every frame on its own, ``batch`` frames per step), then alternately backward
        and forward, each frame started half from itself and half from its warped neighbour and held
        to both neighbours (with ``batch > 1``, ``batch`` frames per step against their neighbours
        from the pass before); the clip is written after the last pass (or the frames done at a
        cancel)."""
        ins = [np.asarray(f) for f in frames]
        back, fwd = [None], [None]  # back[i]: i -> i-1 with its certainty; fwd[i]: i-1 -> i likewise
        for i in range(1, len(ins)):
            f, b = self.flows.pair(ins[i - 1], ins[i])
            back.append((b, certainty(b, f)))
            fwd.append((f, certainty(f, b)))
        outs: list[np.ndarray | None] = [None] * len(ins)
        try:
            for p in range(1, passes + 1):
                order = list(range(len(ins)) if p % 2 else range(len(ins) - 1, -1, -1))
                if batch == 1:
                    for i in order:
                        init, anchors = self._job(i, p, ins[i], outs, back, fwd)
                        outs[i] = self.frame(i, frames[i], init, anchors, p)
                        bar.update(1)
                        if self._stopping:
                            raise _Stop
                    continue
                before = list(outs)  # Jacobi: every frame of this pass against the pass before
                for k in range(0, len(order), batch):
                    chunk = order[k : k + batch]
                    jobs = [self._job(i, p, ins[i], before, back, fwd, first_alone=True) for i in chunk]
                    done = self.frames(chunk, [frames[i] for i in chunk], jobs, p)
                    for i, out in zip(chunk, done, strict=True):
                        outs[i] = out
                    bar.update(len(chunk))
                    if self._stopping:
                        raise _Stop
        finally:
            for out in outs:
                if out is None:
                    break
                writer.write(out)
            for i in range(1, len(outs)):
                if outs[i] is not None and outs[i - 1] is not None:
                    self.flicker.append(pair_error(outs[i - 1], outs[i], *back[i]))

    def frames(self, idx: list[int], contents: list[Image.Image], jobs: list, p: int) -> list[np.ndarray]:
        """Frames ``idx`` stylised together (one engine step for all: ``stylize_many``)."""

        def on_step(s: Any) -> bool:
            self._report(idx[0], p, s.step, s.losses, None, False)
            return not self._stopping

        kw = {k: v for k, v in self.call.items() if k != "progress_bar"}
        with self._stoppable():
            imgs = self.engine.stylize_many(
                contents,
                self.style,
                inits=[j[0] for j in jobs],
                anchors=[j[1] for j in jobs],
                progress=on_step,
                progress_bar=False,
                **kw,
            )
        return [self._finish(i, p, img) for i, img in zip(idx, imgs, strict=True)]

    def _job(
        self, i: int, p: int, cur: np.ndarray, outs: list, back: list, fwd: list, first_alone: bool = False
    ) -> tuple[np.ndarray | None, list[PixelAnchor]]:
        """Frame ``i``'s start image and anchors in pass ``p``, from its neighbours in ``outs``."""
        if p == 1 and first_alone:
            return None, []
        anchors, inits = [], []
        if self.weight > 0:
            if i > 0 and outs[i - 1] is not None:  # the previous frame, brought onto frame i
                w = _warp_image(outs[i - 1], back[i][0])
                anchors.append(self._temporal(w, back[i][1]))
                inits.append((w, back[i][1]))
            if i + 1 < len(outs) and outs[i + 1] is not None:  # the next frame, likewise
                w = _warp_image(outs[i + 1], fwd[i + 1][0])
                anchors.append(self._temporal(w, fwd[i + 1][1]))
                inits.append((w, fwd[i + 1][1]))
        base = (outs[i] if outs[i] is not None else cur) / 255.0
        init = None
        if inits:  # the neighbour the pass comes from (forward: i - 1; backward: i + 1)
            w, m = inits[0] if p % 2 else inits[-1]
            start = w / 255.0 if outs[i] is None else 0.5 * w / 255.0 + 0.5 * base
            init = _blend(m, start, base)
        elif outs[i] is not None:
            init = base.astype(np.float32)
        return init, anchors
