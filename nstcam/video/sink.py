"""Writing clips: a video file chosen by its extension (H.264 mp4/mov/mkv, VP9 webm, GIF) with the
source's audio carried over, or a folder of PNG frames. Frames are written as they come; a file
appears at its path only when it is complete (a playable clip of the frames written, even after a
cancel)."""

from __future__ import annotations

import contextlib
import logging
import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

from nstcam._files import atomic_file
from nstcam.image import save_image
from nstcam.video._container import open_media
from nstcam.video.source import VideoInfo

__all__ = ["CODECS", "VideoWriter", "even_size"]

logger = logging.getLogger(__name__)

CODECS = {".mp4": "libx264", ".mov": "libx264", ".mkv": "libx264", ".webm": "libvpx-vp9", ".gif": "gif"}
"""Output extension -> video encoder."""
_AUDIO_OK = {".webm": ("opus", "vorbis")}  # containers that take only some audio codecs
_FORMATS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm", ".gif": "gif"}


def even_size(size: tuple[int, int], output: str | os.PathLike) -> tuple[int, int]:
    """``size`` made even on both sides where the output's encoder needs it (4:2:0 chroma)."""
    w, h = size
    if Path(output).suffix.lower() in CODECS and Path(output).suffix.lower() != ".gif":  # 4:2:0
        return max(2, w - w % 2), max(2, h - h % 2)
    return w, h


def _even_footer(footer: Image.Image, size: tuple[int, int], path: Path) -> Image.Image:
    """``footer`` as wide as the frames, one black row added where the encoder needs even sides."""
    if footer.width != size[0]:
        raise ValueError(f"footer is {footer.width} px wide, the frames {size[0]} px")
    if footer.height % 2 and even_size((2, footer.height), path) != (2, footer.height):
        out = Image.new("RGB", (footer.width, footer.height + 1), (0, 0, 0))
        out.paste(footer, (0, 0))
        return out
    return footer


def _is_folder(path: Path) -> bool:
    return path.is_dir() or not path.suffix


class VideoWriter:
    """Writes frames to ``path``: a video file (by extension, see :data:`CODECS`) or, for a folder
    (an existing directory or a path without an extension), ``frame_000001.png``... in order.

    Args:
        path: where the clip goes.
        fps: frames per second.
        size: (width, height) of every frame.
        audio_from: the source clip, whose audio stream is copied (or re-encoded where the container
            needs another codec) over the frames written.
        crf: quality of H.264/VP9 (lower is better; 18 is visually lossless for H.264).
        metadata: the container's tags (``{"comment": ...}``: random weights say so); a folder of
            PNG frames has none.
        footer: a strip as wide as the frames drawn under every one (a file's frames are then that
            much taller; random weights say so there), never over the picture.

    Use as a context manager; :meth:`close` finishes the file (``abort`` leaves no file).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        fps: float,
        size: tuple[int, int],
        *,
        audio_from: VideoInfo | None = None,
        crf: int = 18,
        metadata: dict[str, str] | None = None,
        footer: Image.Image | None = None,
    ) -> None:
        self.path = Path(path)
        self.size = size
        self._footer = None if footer is None else _even_footer(footer.convert("RGB"), size, self.path)
        self.fps = fps
        self.frames = 0
        audio = audio_from if audio_from is not None and audio_from.has_audio else None
        self._stack = contextlib.ExitStack()
        self._folder = _is_folder(self.path)
        if self._folder:
            self.path.mkdir(parents=True, exist_ok=True)
            return
        ext = self.path.suffix.lower()
        if ext not in CODECS:
            raise ValueError(
                f"output: {self.path.name} has an unknown extension; use one of {', '.join(CODECS)} "
                "or a folder (no extension) for PNG frames"
            )
        if size != even_size(size, self.path):
            raise ValueError(f"output: {ext} needs even sides, got {size[0]}x{size[1]} (see even_size)")
        footed = (size[0], size[1] + (0 if self._footer is None else self._footer.height))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self._stack.enter_context(atomic_file(self.path, ext))
        self._out = self._stack.enter_context(av.open(fh, "w", format=_FORMATS[ext]))
        self._out.metadata.update(metadata or {})
        rate = Fraction(fps).limit_denominator(1001)
        self._stream = self._out.add_stream(CODECS[ext], rate=rate)
        self._stream.width, self._stream.height = footed
        self._stream.pix_fmt = "pal8" if ext == ".gif" else "yuv420p"
        if ext != ".gif":
            self._stream.options = {"crf": str(crf)} | ({"b:v": "0"} if ext == ".webm" else {})
        self._sound = None
        if audio is not None and ext == ".gif":
            logger.info("%s: GIF has no audio; the source's audio is left out", audio.name)
        elif audio is not None:
            self._sound = _Audio(audio, self._out, ext)

    def write(self, frame: np.ndarray | Image.Image) -> None:
        """Appends one RGB frame of :attr:`size`."""
        a = np.asarray(frame.convert("RGB") if isinstance(frame, Image.Image) else frame, dtype=np.uint8)
        if (a.shape[1], a.shape[0]) != self.size:
            raise ValueError(
                f"frame is {a.shape[1]}x{a.shape[0]} px, the clip is {self.size[0]}x{self.size[1]}"
            )
        self.frames += 1
        if self._footer is not None:
            a = np.concatenate([a[..., :3], np.asarray(self._footer)], axis=0)
        if self._folder:
            save_image(Image.fromarray(a), self.path / f"frame_{self.frames:06d}.png")
            return
        if self._stream.pix_fmt == "pal8":
            vf = av.VideoFrame.from_ndarray(_palette(a), format="pal8")
        else:
            vf = av.VideoFrame.from_ndarray(a, format="rgb24")
        for packet in self._stream.encode(vf):
            self._out.mux(packet)

    def close(self) -> Path:
        """Flushes the encoder, copies the audio over the frames written, and puts the file in place.

        A clip with no frame written leaves no file.
        """
        if self._folder:
            stale = [f for f in self.path.glob("frame_*.png") if _frame_number(f) > self.frames]
            for f in stale:  # an earlier, longer run's frames would play on after this clip
                f.unlink()
            if stale:
                logger.info("%s: removed %d frames of an earlier run", self.path, len(stale))
            return self.path
        if self.frames == 0:
            self.abort()
            raise ValueError(f"output: no frame was written to {self.path.name}")
        try:
            for packet in self._stream.encode():
                self._out.mux(packet)
            if self._sound is not None:
                self._sound.write(self.frames / self.fps)
        except BaseException:
            self.abort()
            raise
        self._stack.close()
        return self.path

    def abort(self) -> None:
        """Stops without leaving a file."""
        with contextlib.suppress(Exception):
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _frame_number(f: Path) -> int:
    digits = f.stem.removeprefix("frame_")
    return int(digits) if digits.isdigit() and len(digits) == 6 else 0


def _palette(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An RGB frame as GIF's 256 colours: indices and an ARGB palette (PyAV's pal8)."""
    q = Image.fromarray(a).quantize(256, method=Image.Quantize.MEDIANCUT)
    pal = np.array(q.getpalette()[:768], np.uint8).reshape(-1, 3)
    pal = np.pad(pal, ((0, 256 - len(pal)), (0, 0)))
    argb = np.concatenate([np.full((256, 1), 255, np.uint8), pal], axis=1)
    return np.asarray(q, dtype=np.uint8), argb


class _Audio:
    """The source's first audio stream, set up in the output before any frame (a container's header
    is written with its first packet): packets copied untouched where the container takes the codec,
    else decoded and re-encoded (Opus for webm)."""

    def __init__(self, src: VideoInfo, out: av.container.OutputContainer, ext: str) -> None:
        self.src, self.out = src, out
        with open_media(src.path, src.name) as c:
            a_in = c.streams.audio[0]
            allowed = _AUDIO_OK.get(ext)
            self.copy = allowed is None or a_in.codec_context.name in allowed
            if self.copy:
                self.stream = out.add_stream_from_template(a_in)
            else:
                self.stream = out.add_stream("libopus", rate=48000, layout="stereo")

    def write(self, seconds: float) -> None:
        """The source's audio up to ``seconds`` (the frames written)."""
        with open_media(self.src.path, self.src.name) as c:
            a_in = c.streams.audio[0]
            if self.copy:
                for packet in c.demux(a_in):
                    if packet.dts is None:
                        continue
                    if packet.pts is not None and float(packet.pts * a_in.time_base) >= seconds:
                        break
                    packet.stream = self.stream
                    self.out.mux(packet)
                return
            resampler = av.AudioResampler(format="s16", layout="stereo", rate=48000)
            for frame in c.decode(a_in):
                if frame.time is not None and frame.time >= seconds:
                    break
                for f in resampler.resample(frame):
                    f.pts = None
                    for packet in self.stream.encode(f):
                        self.out.mux(packet)
            for packet in self.stream.encode():
                self.out.mux(packet)
