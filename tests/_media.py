"""Test clips with known motion, made from the bundled samples (no sample video ships): a window
panning over chelsea.png by a whole number of pixels per frame, so the true flow is exact; written
with PyAV (with an AAC tone when asked), or as a folder of PNGs. Shared by the video, app, CLI,
server, security, Ray and README tests."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

__all__ = ["SAMPLES", "H", "W", "panning", "streams", "true_flows", "write_clip", "write_frames"]

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
