"""A learned style on photos with clipped blacks and whites (issue 65): the held-out photos of
``bench_learn.py`` with their contrast raised around mid-grey and clipped to [0, 255], painted by
the one pass and by a saved learned style, judged by the real EfficientNet-Lite0
(``tests/_style_judge.py``): the style move and the rank of each clipped photo's own top class.

    python tests/benchmarks/bench_learn.py --paintings gravel.png --minutes 10 --save DIR
    python tests/benchmarks/bench_learn_clipped.py DIR/gravel_painting.png DIR/gravel_learned_10_min.safetensors

Prints one markdown table. Needs the test extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from _style_judge import rank, style_move  # noqa: E402
from bench_learn import HELD_OUT  # noqa: E402

from nstcam import load_image  # noqa: E402
from nstcam.fast import FastStyle  # noqa: E402
from nstcam.image import SAMPLES, resize_long_side  # noqa: E402


def clipped(photo: Image.Image, contrast: float) -> Image.Image:
    """``photo`` with its contrast multiplied around mid-grey, clipped to [0, 255]."""
    a = np.asarray(photo).astype(np.float64)
    return Image.fromarray(np.clip((a - 128) * contrast + 128, 0, 255).astype(np.uint8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("painting", help="the painting the style was learned from (bench_learn --save writes it)")
    ap.add_argument("style", help="the learned style file")
    ap.add_argument("--contrast", type=float, nargs="+", default=[1.0, 1.25, 1.5])
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args()
    fast, painting = FastStyle(), load_image(args.painting)
    print("| photo, contrast | pixels clipped in all channels | one pass: move, rank | learned: move, rank |")
    print("| --- | --- | --- | --- |")
    for name in HELD_OUT:
        photo = resize_long_side(load_image(SAMPLES / name), args.size)
        for k in args.contrast:
            img = clipped(photo, k)
            px = np.asarray(img)
            share = float(((px == 0) | (px == 255)).all(-1).mean())
            cells = []
            for style in (painting, args.style):
                out = fast.stylize(img, style)
                cells.append(f"{style_move(out, img, painting):.3f}, {rank(img, out)}")
            print(f"| {Path(name).stem}, x{k:g} | {share:.0%} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
