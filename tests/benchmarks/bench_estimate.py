"""What the Style tab's cost estimate should say: the optimisation's seconds end to end through the
app's handler, small runs included, fitted as a fixed set-up plus a rate per pixel-step.

    python tests/benchmarks/bench_estimate.py [--repeat 2]

Each (size, steps) runs through ``stylize_handler`` as the page calls it (mode "optimise", its
default start, the steps shared over the scales) on a 3:2 photo, random weights (the cost is that of
the real ones). The fit is least squares of ``seconds = setup + rate * pixel_steps`` with
``pixel_steps`` = :func:`nstcam.app.guard.cost.style_pixel_steps` x 2/3 (a 3:2 photo's share of the
square); it prints each run beside what the estimate says, and the constants for
``nstcam/app/tabs/style.py``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from nstcam.app import AppConfig, Models
from nstcam.app.guard.cost import STYLE_SECONDS_PER_PIXEL_STEP, STYLE_SETUP_SECONDS, style_pixel_steps
from nstcam.app.tabs.style import stylize_handler

SAMPLES = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples"
RUNS = [(128, 5), (128, 20), (256, 20), (256, 50), (384, 50), (384, 100)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=2, help="runs of each, the fastest kept")
    args = p.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    models = Models(AppConfig(random_weights=True, device="cpu", max_size=512, max_steps=300))
    photo = Image.open(SAMPLES / "chelsea.png").convert("RGB").resize((600, 400))
    style = Image.open(SAMPLES / "gravel.png").convert("RGB")
    work = Path("/tmp/nstcam-bench-estimate")
    work.mkdir(exist_ok=True)
    photo.save(work / "photo.png")
    style.save(work / "style.png")
    list(stylize_handler(models, str(work / "photo.png"), str(work / "style.png"), None, 0.0, 64, 1))  # warm
    rows = []
    for size, steps in RUNS:
        best = np.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            *_, (_, status, _) = stylize_handler(
                models, str(work / "photo.png"), str(work / "style.png"), None, 0.0, size, steps
            )
            best = min(best, time.perf_counter() - t)
        rows.append((size, steps, style_pixel_steps(size, steps) * 2 / 3, best, status.split(",")[1]))
    x = np.array([[1.0, r[2]] for r in rows])
    y = np.array([r[3] for r in rows])
    (setup, rate), *_ = np.linalg.lstsq(x, y, rcond=None)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| size | steps | pixel-steps | seconds | fitted | estimate now | run |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    now = STYLE_SECONDS_PER_PIXEL_STEP["cpu"]
    for size, steps, px, s, run in rows:
        print(
            f"| {size} | {steps} | {px:,.0f} | {s:.2f} | {setup + rate * px:.2f} | "
            f"{STYLE_SETUP_SECONDS['cpu'] + now * px:.2f} | {run.strip()} |"
        )
    print(f"fit: STYLE_SETUP_SECONDS = {setup:.2f}, STYLE_SECONDS_PER_PIXEL_STEP = {rate:.3g}")


if __name__ == "__main__":
    main()
