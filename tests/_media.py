"""Test clips with known motion, made from the bundled samples (no sample video ships): a window
panning over chelsea.png by a whole number of pixels per frame, so the true flow is exact; written
with PyAV (with an AAC tone when asked), or as a folder of PNGs. Shared by the video, app, CLI,
server, security, Ray and README tests."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

__all__ = [
    "SAMPLES",
    "H",
    "W",
    "growing_mjpeg",
    "panning",
    "streams",
    "tick_clip",
    "true_flows",
    "write_clip",
    "write_frames",
]

SAMPLES = Path(__file__).resolve().parents[1] / "nstcam" / "assets" / "samples"
W, H = 96, 64


def panning(n: int = 5, dx: int = 2, dy: int = 0, w: int = W, h: int = H) -> list[np.ndarray]:
    src = np.asarray(Image.open(SAMPLES / "chelsea.png").convert("RGB"))
    return [src[40 + t * dy : 40 + t * dy + h, 100 + t * dx : 100 + t * dx + w].copy() for t in range(n)]


def true_flows(n: int, dx: int, w: int = W, h: int = H) -> list[tuple[np.ndarray, np.ndarray]]:
    """Flow t -> t-1 of a window moving right by dx px per frame: (+dx, 0); the last dx columns
    come from outside the previous frame."""
    flow = np.tile(np.array([dx, 0], np.float32), (h, w, 1))
    mask = np.ones((h, w), np.float32)
    mask[:, w - dx :] = 0
    return [(flow, mask)] * (n - 1)


def write_frames(folder: Path, frames: list[np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        Image.fromarray(f).save(folder / f"f{i:03d}.png")
    return folder


def write_clip(path: Path, frames: list[np.ndarray], fps: int = 12, audio: bool = False) -> Path:
    """A clip written with PyAV; with ``audio``, a 440 Hz tone in AAC over the clip's length."""
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264" if path.suffix != ".gif" else "gif", rate=Fraction(fps))
        vs.width, vs.height = frames[0].shape[1], frames[0].shape[0]
        vs.pix_fmt = "yuv420p" if path.suffix != ".gif" else "rgb8"
        a_s = out.add_stream("aac", rate=16000, layout="mono") if audio else None
        for f in frames:
            for p in vs.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
        if a_s is not None:
            n = int(16000 * len(frames) / fps)
            tone = np.sin(np.arange(n) / 16000 * 2 * np.pi * 440).astype(np.float32)[None]
            for k in range(0, n, 1024):
                af = av.AudioFrame.from_ndarray(
                    np.ascontiguousarray(tone[:, k : k + 1024]), format="fltp", layout="mono"
                )
                af.sample_rate, af.pts = 16000, k
                for p in a_s.encode(af):
                    out.mux(p)
            for p in a_s.encode():
                out.mux(p)
    return path


def streams(path: Path) -> tuple[int, float, list[str], tuple[int, int]]:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        kinds = [s.type for s in c.streams]
        frames = sum(1 for _ in c.decode(v))
        return frames, float(v.average_rate), kinds, (v.width, v.height)


def tick_clip(path: Path, frames: int = 2000, rate: int = 1000, side: int = 64) -> Path:
    """A hostile clip: one frame per tick of a fine timebase (``frames`` at ``rate`` per second, so
    2,000 frames last 2 s), a still grey-blue square in libx264: small on disk (a few kB per
    thousand frames), its duration under any limit in seconds, its frame count far over."""
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=Fraction(rate))
        vs.width = vs.height = side
        vs.pix_fmt = "yuv420p"
        vs.codec_context.time_base = Fraction(1, rate)
        still = np.full((side, side, 3), (90, 120, 150), np.uint8)
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(still, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, rate)
            for p in vs.encode(f):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return path


def growing_mjpeg(path: Path, big: int = 6000, n_big: int = 3) -> Path:
    """A hostile clip: an MJPEG AVI whose header and first frame are 64x64 and whose next ``n_big``
    frames are ``big`` x ``big`` JPEGs (a flat grey, so the file stays small): what a check of the
    first frame alone lets through."""
    small, large = io.BytesIO(), io.BytesIO()
    Image.new("RGB", (64, 64), (90, 120, 150)).save(small, "JPEG")
    Image.new("L", (big, big), 128).save(large, "JPEG", quality=10)
    with av.open(str(path), "w", format="avi") as out:
        vs = out.add_stream("mjpeg", rate=10)
        vs.width = vs.height = 64
        vs.pix_fmt = "yuvj420p"
        for i, data in enumerate([small.getvalue()] + [large.getvalue()] * n_big):
            p = av.Packet(data)
            p.stream, p.pts, p.dts, p.time_base = vs, i, i, Fraction(1, 10)
            out.mux(p)
    return path
