"""Flicker and cost of video stylisation: the per-frame baseline against temporal consistency.

    python tests/benchmarks/bench_video.py [--device cuda] [--size 128] [--steps 50] [--frames 8]
        [--optimizer adam --batch-frames 4] [--also-weights 200]

The clip is synthetic, so its motion is known exactly: a window panning over chelsea.png (3 px right,
1 px down per frame) with coffee.png moving the other way across it (occlusions and disocclusions).
For each setting it prints seconds per frame (flow, warping and writing included), the warping error
measured with DIS flow (what ``VideoResult.warping_error`` reports) and with the true flow, and the
mean final style loss (how much style the frames kept). Random weights: the cost is that of the real
weights; the warping errors compare settings on the same network, not absolute quality.

Targets (issue 20): warping error (true flow) at most 0.5x the baseline's; temporal consistency at
most 1.3x the baseline's time per frame on a CPU; on an H100, at least 5 frames/s at 512 px and
100 steps per frame.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from nstcam import StyleTransfer
from nstcam.video import DEFAULT_TEMPORAL_WEIGHT, optical_flow, warping_error

SAMPLES = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples"
V_BG = np.array([3, 1])  # the window moves by this much per frame: the background's flow t -> t-1
V_FG = np.array([-4, 0])  # the moving patch, in window coordinates


def clip(n: int, w: int, h: int) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """Frames and, for each pair, the true flow t -> t-1 with the mask of pixels visible in both."""
    bg = np.asarray(Image.open(SAMPLES / "chelsea.png").convert("RGB").resize((w * 2, h * 2)))
    ph, pw = h // 3, w // 4
    fg = np.asarray(Image.open(SAMPLES / "coffee.png").convert("RGB").resize((pw, ph)))
    frames, where = [], []
    for t in range(n):
        x0, y0 = 10 + t * V_BG[0], 10 + t * V_BG[1]
        f = bg[y0 : y0 + h, x0 : x0 + w].copy()
        px, py = w - pw - 4 + t * V_FG[0], h // 3 + t * V_FG[1]
        f[py : py + ph, px : px + pw] = fg
        frames.append(f)
        where.append((px, py))
    flows = []
    ys, xs = np.mgrid[0:h, 0:w]
    for t in range(1, n):
        (px, py), (qx, qy) = where[t], where[t - 1]
        in_fg = (xs >= px) & (xs < px + pw) & (ys >= py) & (ys < py + ph)
        flow = np.where(in_fg[..., None], -V_FG, V_BG).astype(np.float32)
        sx, sy = xs + flow[..., 0], ys + flow[..., 1]  # where each pixel was in frame t-1
        inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
        was_fg = (sx >= qx) & (sx < qx + pw) & (sy >= qy) & (sy < qy + ph)
        mask = inside & (was_fg == in_fg)  # background that was under the patch: disoccluded
        flows.append((flow, mask.astype(np.float32)))
    return frames, flows


def _x(value: float, base: float) -> float:
    """``value`` as a multiple of ``base`` (NaN where the baseline is 0: frames that never moved)."""
    return value / base if base else float("nan")


def run(st, folder: Path, style, out: Path, device, **kw) -> tuple[float, list[np.ndarray], object]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    res = st.stylize_video(folder, style, out, progress_bar=False, **kw)
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = (time.perf_counter() - t) / res.frames
    height = res.size[1]  # random weights: the label's margin below each frame is not the frame
    frames = [np.asarray(Image.open(p))[:height] for p in sorted(out.iterdir())]
    return secs, frames, res


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--optimizer", default="lbfgs", choices=["lbfgs", "adam"])
    p.add_argument(
        "--batch-frames", type=int, default=0, help="with --optimizer adam: add a row of N frames per step"
    )
    p.add_argument(
        "--also-weights", default="", help="comma-separated temporal weights to add rows for, e.g. 200"
    )
    a = p.parse_args(argv)
    device = torch.device(a.device)
    st = StyleTransfer("random", device=device)
    w, h = a.size, a.size * 2 // 3
    frames, true = clip(a.frames, w, h)
    style = Image.open(SAMPLES / "hubble_deep_field.jpg")
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, random weights")
    print(f"clip: {a.frames} frames of {w}x{h} px, {a.steps} steps per frame, {a.optimizer}")
    epe = [  # DIS against the true motion, where the pixel is visible in both frames
        float((np.sqrt(((optical_flow(frames[t], frames[t - 1]) - flow) ** 2).sum(-1)) * m).sum() / m.sum())
        for t, (flow, m) in enumerate(true, start=1)
    ]
    print(
        f"DIS flow endpoint error against the true motion: mean {np.mean(epe):.3f} px, worst pair {max(epe):.3f} px\n"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        for i, f in enumerate(frames):
            Image.fromarray(f).save(folder / f"{i:04d}.png")
        st.stylize(frames[0], style, size=64, steps=2, progress_bar=False)  # warm-up
        settings = [
            ("per frame (temporal_weight=0)", dict(temporal_weight=0.0)),
            (f"temporal (temporal_weight={DEFAULT_TEMPORAL_WEIGHT:g}, default)", dict()),
            ("temporal, passes=2 (same steps in all)", dict(passes=2)),
        ]
        if a.batch_frames > 1 and a.optimizer == "adam":
            settings.append(
                (
                    f"temporal, passes=2, batch_frames={a.batch_frames}",
                    dict(passes=2, batch_frames=a.batch_frames),
                )
            )
        for wt in filter(None, a.also_weights.split(",")):
            settings.append((f"temporal (temporal_weight={float(wt):g})", dict(temporal_weight=float(wt))))
        for k, (label, extra) in enumerate(settings):
            kw = dict(size=a.size, steps=a.steps, optimizer=a.optimizer, seed=0, **extra)
            secs, outs, res = run(st, folder, style, Path(tmp) / f"out{k}", device, **kw)
            style_loss = float(np.mean([hist["style"][-1] for hist in res.histories]))
            trend = (res.histories[1]["style"][-1], res.histories[-1]["style"][-1])  # frame 2, last frame
            rows.append(
                dict(
                    label=label, secs=secs, dis=res.warping_error, true=warping_error(outs, flows=true),
                    style=style_loss, trend=trend,
                )
            )  # fmt: skip
    base = rows[0]
    print("| setting | s per frame | x baseline time | warping error (DIS flow) | warping error (true flow) "
          "| x baseline (true) | final style loss | style loss, frame 2 -> last |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['label']} | {r['secs']:.2f} | {_x(r['secs'], base['secs']):.2f} | {r['dis']:.5f} | "
            f"{r['true']:.5f} | {_x(r['true'], base['true']):.2f} | {r['style']:.4f} | "
            f"{r['trend'][0]:.3f} -> {r['trend'][1]:.3f} |"
        )
    t = rows[1]
    print(
        f"\ntargets: warping error <= 0.5x baseline: {_x(t['true'], base['true']):.2f}x "
        f"({'met' if t['true'] <= 0.5 * base['true'] else 'NOT met'}); "
        f"time <= 1.3x baseline: {_x(t['secs'], base['secs']):.2f}x "
        f"({'met' if t['secs'] <= 1.3 * base['secs'] else 'NOT met'})"
    )
    if device.type == "cuda":
        print(f"frames per second at {a.size} px, {a.steps} steps: {1 / t['secs']:.2f}")
    return rows


if __name__ == "__main__":
    main()
