"""Reading clips: a video file that PyAV decodes, or a folder or glob of frames, probed before any
heavy work and then decoded as a stream (one frame in memory at a time)."""

from __future__ import annotations

import errno
import glob
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from PIL import Image

from nstcam._files import VIDEO_EXTENSIONS
from nstcam.image import DEFAULT_MAX_PIXELS, ImageError, load_image, probe_image
from nstcam.video._container import MediaError, open_media

__all__ = [
    "FRAME_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "VideoError",
    "VideoInfo",
    "check_limits",
    "probe_video",
    "read_frames",
]

logger = logging.getLogger(__name__)

"""Files a dataset treats as videos (an animated GIF stays an image there; stylize_video reads it)."""
FRAME_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
DEFAULT_FPS = 25.0
"""Frame rate of a folder of frames when none is given."""


class VideoError(ValueError):
    """A clip nstcam cannot use: not a video, truncated, no frames, an unreadable codec, frames of
    different sizes, or over a limit. The message names the file and the limit.

    Attributes:
        trimmable: keeping the start of the clip (``trim``) would make it fit: the clip is over a
            limit on its length, and at least one frame fits.
    """

    def __init__(self, message: str, *, trimmable: bool = False) -> None:
        super().__init__(message)
        self.trimmable = trimmable


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` learnt about a clip without decoding it all.

    Attributes:
        name: how messages call the clip (its own file name, never a server's temporary path).
        path: the file, or the folder / pattern of frames.
        frames: number of frames.
        fps: frames per second (a video's average rate; variable rates are written at it).
        width: width of the frames as shown (rotation applied).
        height: height of the frames as shown.
        rotation: degrees the frames are turned to show upright (from the display matrix).
        has_audio: the file has an audio stream.
        files: the frame files, in order, for a folder or glob.
        max_pixels: the largest frame the probe accepted; :func:`read_frames` holds every frame to
            it, not only the first (None: no limit).
        more_frames: the probe stopped counting at ``frames`` (its ``max_frames`` + 1): the clip
            has at least that many.
    """

    name: str
    path: Path
    frames: int
    fps: float
    width: int
    height: int
    rotation: int = 0
    has_audio: bool = False
    files: tuple[Path, ...] = field(default=(), repr=False)
    max_pixels: int | None = field(default=None, repr=False)
    more_frames: bool = False

    @property
    def duration(self) -> float:
        """Seconds of video."""
        return self.frames / self.fps

    @property
    def is_folder(self) -> bool:
        """The clip is a folder or glob of frame files."""
        return bool(self.files)


def _frame_files(src: str) -> list[Path] | None:
    """A folder's or a glob's frame files; None for a file (``clip[1].mp4`` is a file, not a glob)."""
    p = Path(src)
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in FRAME_EXTENSIONS)
    if not p.exists() and any(ch in src for ch in "*?["):
        return sorted(Path(f) for f in glob.glob(src) if Path(f).suffix.lower() in FRAME_EXTENSIONS)
    return None


def _probe_frames(
    files: list[Path], src: str, name: str, fps: float | None, max_pixels: int | None
) -> VideoInfo:
    if not files:
        raise VideoError(f"{name}: no frame files ({', '.join(FRAME_EXTENSIONS)}) found")
    sizes = {}
    for f in files:
        try:
            sizes[f] = probe_image(f, name=f.name, max_pixels=max_pixels)
        except ImageError as e:
            raise VideoError(f"{name}: {e}") from None
    first = sizes[files[0]]
    odd = next((f for f in files if sizes[f] != first), None)
    if odd is not None:
        w, h = sizes[odd]
        raise VideoError(
            f"{name}: frame {odd.name} is {w}x{h} px but {files[0].name} is {first[0]}x{first[1]}; "
            "every frame of a folder must have one size"
        )
    rate = DEFAULT_FPS if fps is None else float(fps)
    return VideoInfo(name, Path(src), len(files), rate, *first, files=tuple(files), max_pixels=max_pixels)


def _rotation(frame: av.VideoFrame) -> int:
    return round(float(getattr(frame, "rotation", 0) or 0)) % 360


def _check_frame_pixels(name: str, width: int, height: int, max_pixels: int | None) -> None:
    if max_pixels is not None and width * height > max_pixels:
        raise VideoError(
            f"{name}: its frames are {width}x{height} = {width * height / 1e6:.3g} MP, over the limit of "
            f"{max_pixels / 1e6:.3g} MP per frame; scale the clip down first."
        )


def _limit_decoder(stream: Any, max_pixels: int | None) -> None:
    """FFmpeg's decoder refuses a frame over ``max_pixels`` before it allocates it (a clip whose
    later frames grow: 16000x16000 after a 64x64 first one)."""
    if max_pixels is not None:
        stream.codec_context.options = {**stream.codec_context.options, "max_pixels": str(int(max_pixels))}


def _count_packets(container: Any, stream: Any, max_frames: int | None) -> int:
    """The stream's video packets (not decoded: quick), counting at most ``max_frames`` + 1."""
    count = 0
    for packet in container.demux(stream):
        if packet.size:
            count += 1
            if max_frames is not None and count > max_frames:
                break
    return count


def _probe_file(path: Path, name: str, max_pixels: int | None, max_frames: int | None) -> VideoInfo:
    if not path.exists():
        raise FileNotFoundError(f"video file not found: {name}")
    if path.stat().st_size == 0:
        raise VideoError(f"{name} is empty (0 bytes)")
    try:
        # the frame size from the headers alone: FFmpeg's probe decodes no frame with skip_frame=all
        # (an 8192x4320 clip is refused at +4 MB instead of +86 MB)
        with open_media(path, name, {"skip_frame": "all"}) as c:
            if c.streams.video:
                cc = c.streams.video[0].codec_context
                _check_frame_pixels(name, cc.width, cc.height, max_pixels)
        with open_media(path, name) as c:
            if not c.streams.video:
                raise VideoError(f"{name} has no video stream")
            vs = c.streams.video[0]
            has_audio = bool(c.streams.audio)
            declared = vs.frames
            count = _count_packets(c, vs, max_frames)
        more = max_frames is not None and count > max_frames
        if count == 0:
            raise VideoError(f"{name} has no video frames")
        if declared and count < declared and not more:
            raise VideoError(f"{name} is truncated: its header says {declared} frames, {count} are there")
        with open_media(path, name) as c:
            vs = c.streams.video[0]
            codec = vs.codec_context.name
            _limit_decoder(vs, max_pixels)
            try:
                first = next(c.decode(vs))
            except (av.error.FFmpegError, StopIteration) as e:
                why = getattr(e, "strerror", None) or "no frame came out"
                raise VideoError(f"{name} cannot be decoded as {codec} video ({why})") from None
            rate = vs.average_rate or vs.guessed_rate or Fraction(int(DEFAULT_FPS))
    except MediaError as e:
        raise VideoError(str(e)) from None
    except av.error.FFmpegError as e:
        raise VideoError(
            f"{name} is not a video PyAV can read ({type(e).__name__}: {e.strerror or e})"
        ) from None
    _check_frame_pixels(name, first.width, first.height, max_pixels)  # a header that lied
    rot = _rotation(first)
    w, h = (first.height, first.width) if rot in (90, 270) else (first.width, first.height)
    return VideoInfo(
        name, path, count, float(rate), w, h, rot, has_audio, max_pixels=max_pixels, more_frames=more
    )


def probe_video(
    src: str | os.PathLike,
    *,
    name: str | None = None,
    fps: float | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    max_frames: int | None = None,
) -> VideoInfo:
    """Checks a clip before any heavy work: its frames are within ``max_pixels`` (read from the
    header, before any frame is decoded), the file opens, has video packets that are all there (a
    truncated file is refused), its first frame decodes; or every frame of a folder has one size.

    Args:
        src: a video file (mp4, webm, mov, mkv, animated GIF... anything PyAV decodes), a folder of
            frames, or a glob pattern of frames (sorted by name). A path that exists is never read
            as a pattern: ``clip[1].mp4`` is that file.
        name: how messages call the clip (default: its path).
        fps: frame rate of a folder of frames (default 25); ignored for a video file.
        max_pixels: largest frame (width x height) accepted; None for no limit. The default is the
            image limit, :data:`nstcam.image.DEFAULT_MAX_PIXELS` (40 MP). It holds for every frame
            :func:`read_frames` decodes, not only the first.
        max_frames: stop counting a file's frames past this many (the count is of packets, not
            decoded: 100,000 take about 0.8 s); the clip then has ``more_frames`` set, and
            :func:`check_limits` given the same ``max_frames`` refuses or trims it. None: count all.

    Raises:
        FileNotFoundError: no such file.
        VideoError: the clip cannot be used; the message names it and says why.
    """
    text = os.fspath(src)
    label = name or text
    files = _frame_files(text)
    if files is not None:
        return _probe_frames(files, text, label, fps, max_pixels)
    return _probe_file(Path(text), label, max_pixels, max_frames)


def check_limits(
    info: VideoInfo,
    *,
    max_seconds: float | None = None,
    max_frame_pixels: int | None = None,
    frame_size: tuple[int, int] | None = None,
    max_frames: int | None = None,
    trim: bool = False,
) -> int:
    """How many frames of ``info`` to use under a server's limits.

    Args:
        info: the probed clip.
        max_seconds: longest clip, in seconds (at the clip's own frame rate).
        max_frame_pixels: most frames x pixels (at ``frame_size``, the size frames are stylised at).
        frame_size: (width, height) the frames are stylised at (default: their own).
        max_frames: most frames, whatever the rate: a clip of one frame per timebase tick (10,000
            frames in 10 s) passes a limit in seconds, not this one.
        trim: over a limit, keep the frames that fit (the start of the clip) instead of refusing.

    Raises:
        VideoError: over a limit and not ``trim``; the message gives the limit and the way out
            (``trimmable`` where keeping the start would fit).
    """
    w, h = frame_size or (info.width, info.height)
    fit = info.frames
    why = []
    many = f"more than {info.frames - 1:,}" if info.more_frames else f"{info.frames:,}"
    if max_seconds is not None and info.duration > max_seconds:
        fit = min(fit, int(max_seconds * info.fps))
        why.append(f"{info.duration:.1f} s is over the limit of {max_seconds:g} s")
    if max_frames is not None and info.frames > max_frames:
        fit = min(fit, max_frames)
        why.append(f"{many} frames ({info.fps:.4g} fps) are over the limit of {max_frames:,} frames")
    big = max_frame_pixels is not None and info.frames * w * h > max_frame_pixels  # a smaller size helps
    if big:
        fit = min(fit, max_frame_pixels // (w * h))
        why.append(f"{many} frames of {w}x{h} px are over the limit of {max_frame_pixels:,} frame pixels")
    if not why:
        return info.frames
    if fit < 1:
        fix = "Use a smaller size." if big else f"Allow at least {1 / info.fps:.2g} s."
        raise VideoError(f"{info.name}: {'; '.join(why)}; not even one frame fits. {fix}")
    if not trim:
        raise VideoError(
            f"{info.name}: {'; '.join(why)}. Trim it to the first {fit} frames ({_seconds(fit / info.fps)} s)"
            + (", or use a smaller size." if big else "."),
            trimmable=True,
        )
    logger.info("%s: trimmed to the first %d of %d frames (%s)", info.name, fit, info.frames, "; ".join(why))
    return fit


def _seconds(s: float) -> str:
    """``1.0``, ``0.6``; ``0.022`` (a clip of 1,000 fps: a tenth of a second is 100 frames)."""
    return f"{s:.1f}" if s >= 0.1 else f"{s:.2g}"


def read_frames(info: VideoInfo, max_frames: int | None = None) -> Iterator[np.ndarray]:
    """The clip's frames, in order, as RGB ``(H, W, 3)`` uint8 arrays shown upright, decoded one at a
    time (memory does not grow with the clip).

    Raises:
        VideoError: a frame cannot be decoded (the message names the clip and the frame).
    """
    limit = info.frames if max_frames is None else min(info.frames, max_frames)
    if info.is_folder:
        for f in info.files[:limit]:
            try:
                yield np.asarray(load_image(f, name=f.name))
            except ImageError as e:
                raise VideoError(f"{info.name}: {e}") from None
        return
    k = info.rotation // 90
    done = 0
    try:
        with open_media(info.path, info.name) as c:
            vs = c.streams.video[0]
            vs.thread_type = "AUTO"
            _limit_decoder(vs, info.max_pixels)
            for frame in c.decode(vs):
                if done >= limit:
                    return
                _check_frame_pixels(
                    f"{info.name}: frame {done + 1}", frame.width, frame.height, info.max_pixels
                )
                a = frame.to_ndarray(format="rgb24")
                yield np.ascontiguousarray(np.rot90(a, k)) if k else a
                done += 1
    except (av.error.FFmpegError, MediaError) as e:
        why = getattr(e, "strerror", None) or e  # FFmpeg's str() holds the path: its reason alone
        if info.max_pixels is not None and getattr(e, "errno", None) == errno.EINVAL:
            why = f"{why}: over the limit of {info.max_pixels / 1e6:.3g} MP per frame, or damaged"
        raise VideoError(f"{info.name}: frame {done + 1} cannot be decoded ({why})") from None
    if done == 0:
        raise VideoError(f"{info.name}: no frame could be decoded")


def to_image(frame: np.ndarray, size: tuple[int, int]) -> Image.Image:
    """A frame as a PIL image of exactly ``size`` (width, height)."""
    img = Image.fromarray(frame)
    return img if img.size == size else img.resize(size, Image.Resampling.LANCZOS)
