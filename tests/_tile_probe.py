"""Run in a fresh process by test_tiles.py and bench_style.py --tile: one tiled and one untiled
stylisation of the same image, with the peak RSS of each above the RSS before it (the peak is
reset through /proc/self/clear_refs before each run), the wall time, and the
results' style distance by an independent judge and seam statistics.

    python tests/_tile_probe.py SIZE TILE STEPS [--no-untiled] [--lbfgs]  -> one JSON line
    (TILE 0: the untiled run only)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))


def reset_peak() -> int:
    """Resets the process's peak RSS to its current RSS (Linux >= 4.0) and returns that RSS."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS:")


def peak_since(base: int) -> int:
    return _status("VmHWM:") - base


def judge_distance(judge, layers, img, style) -> float:
    """Relative Gram distance between ``img`` and ``style`` on a VGG16_bn of other random weights."""
    from nstcam.image import image_to_tensor, resize_long_side
    from nstcam.style._losses import gram
    from nstcam.style.hooks import VGGFeatureHooks

    x = image_to_tensor(img)
    s = image_to_tensor(resize_long_side(style, max(img.size)))
    total = 0.0
    with torch.no_grad(), VGGFeatureHooks(judge.net, layers) as hooks:
        fx, fs = judge._rt.features(hooks, x), judge._rt.features(hooks, s)
        for k in layers:
            gx, gs = gram(fx[k]), gram(fs[k])
            total += float((gx - gs).norm() / gs.norm())
    return total / len(layers)


def seam_ratios(img) -> tuple[float, float]:
    """Largest row (and column) mean |gradient| over the median one."""
    a = np.asarray(img, np.float64)
    rows = np.abs(np.diff(a, axis=0)).mean(axis=(1, 2))
    cols = np.abs(np.diff(a, axis=1)).mean(axis=(0, 2))
    return float(rows.max() / np.median(rows)), float(cols.max() / np.median(cols))


def main() -> None:
    size, tile, steps = (int(v) for v in sys.argv[1:4])
    untiled = "--no-untiled" not in sys.argv
    optimizer = "lbfgs" if "--lbfgs" in sys.argv else "adam"
    torch.set_num_threads(2)
    from nstcam import StyleTransfer, load_image

    content = load_image(ROOT / "nstcam/assets/samples/chelsea.png")
    style = load_image(ROOT / "nstcam/assets/samples/brick.png")
    st = StyleTransfer("random", device="cpu")
    kw = dict(size=size, steps=steps, scales=[size], optimizer=optimizer, seed=0, style_weight=500.0)
    st.stylize(content, style, size=32, steps=1)  # allocations of a first call, outside the readings
    out = {"size": size, "tile": tile, "steps": steps, "optimizer": optimizer}
    tiled = None
    if tile:
        base, t = reset_peak(), time.perf_counter()
        tiled = st.stylize(content, style, tile=tile, tile_overlap=tile // 4, **kw)
        out["tiled_s"] = time.perf_counter() - t
        out["tiled_peak"] = peak_since(base)
        out["tiled_estimate"] = st.estimate_memory(
            *tiled.size, optimizer=optimizer, steps=steps, tile=tile, tile_overlap=tile // 4
        )
    if untiled:
        base, t = reset_peak(), time.perf_counter()
        whole = st.stylize(content, style, **kw)
        out["untiled_s"] = time.perf_counter() - t
        out["untiled_peak"] = peak_since(base)
        out["untiled_estimate"] = st.estimate_memory(*whole.size, optimizer=optimizer, steps=steps)
    judge = StyleTransfer("random", device="cpu", seed=1)  # built after the readings
    layers = ["relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1"]
    if tiled is not None:
        out["tiled_distance"] = judge_distance(judge, layers, tiled, style)
        out["tiled_seams"] = seam_ratios(tiled)
    if untiled:
        out["untiled_distance"] = judge_distance(judge, layers, whole, style)
        out["untiled_seams"] = seam_ratios(whole)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
