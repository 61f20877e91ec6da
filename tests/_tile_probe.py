"""Run in a fresh process by test_tiles.py and bench_style.py --tile: one tiled and one untiled
stylisation of the same image, with the growth of the process's peak RSS after each (the tiled
run first, so the untiled run's higher peak shows in the second reading), the wall time, and the
results' style distance by an independent judge and seam statistics.

    python tests/_tile_probe.py SIZE TILE STEPS [--no-untiled]  -> one JSON line
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
    torch.set_num_threads(2)
    from nstcam import StyleTransfer, load_image

    content = load_image(ROOT / "nstcam/assets/samples/chelsea.png")
    style = load_image(ROOT / "nstcam/assets/samples/brick.png")
    st = StyleTransfer("random", device="cpu")
    kw = dict(size=size, steps=steps, scales=[size], optimizer="adam", seed=0, style_weight=500.0)
    st.stylize(content, style, size=32, steps=1)  # allocations of a first call, outside the readings
    out = {"size": size, "tile": tile, "steps": steps}
    base = peak_bytes()
    t = time.perf_counter()
    tiled = st.stylize(content, style, tile=tile, tile_overlap=tile // 4, **kw)
    out["tiled_s"] = time.perf_counter() - t
    out["tiled_peak"] = peak_bytes() - base
    w, h = tiled.size
    out["tiled_estimate"] = st.estimate_memory(w, h, optimizer="adam", steps=steps, tile=tile, tile_overlap=tile // 4)
    if untiled:
        t = time.perf_counter()
        whole = st.stylize(content, style, **kw)
        out["untiled_s"] = time.perf_counter() - t
        out["untiled_peak"] = peak_bytes() - base
        out["untiled_estimate"] = st.estimate_memory(w, h, optimizer="adam", steps=steps)
    judge = StyleTransfer("random", device="cpu", seed=1)  # built after the readings
    layers = ["relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1"]
    out["tiled_distance"] = judge_distance(judge, layers, tiled, style)
    out["tiled_seams"] = seam_ratios(tiled)
    out["content_distance"] = judge_distance(judge, layers, content.resize(tiled.size), style)
    if untiled:
        out["untiled_distance"] = judge_distance(judge, layers, whole, style)
        out["untiled_seams"] = seam_ratios(whole)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
