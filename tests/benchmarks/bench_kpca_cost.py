"""What KPCA-CAM's eigensolve costs against one masked image of Score-CAM (the unit of the server's
budget, ``NSTCAM_SCORECAM_BUDGET``), by the positions of the layer it reads.

    python tests/benchmarks/bench_kpca_cost.py [--repeat 3]

Times ``nstcam.cam.methods.activation.kernel_pca`` (a float64 ``eigh`` of positions x positions) on
random activations of 64 channels, and Score-CAM's masked images on resnet18 ``layer4`` at a 4:3 photo
(seeded random weights: the time does not depend on them), per image. ``nstcam.app.guard.shapes`` counts
the eigensolve as ``(positions / KPCA_POSITIONS_PER_PASS) ** 3`` masked images; the last column is
that estimate, the one before it the measured ratio.
"""

from __future__ import annotations

import argparse

import torch
from bench_cam_methods import timeit  # the median of a few timed calls after a warm-up
from PIL import Image

from nstcam import GradCAM
from nstcam.app.guard.shapes import KPCA_POSITIONS_PER_PASS
from nstcam.cam.methods.activation import kernel_pca


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    cam = GradCAM("resnet18", weights="random", target_layer="layer4", method="scorecam")
    photo = Image.new("RGB", (320, 240), (120, 90, 60))
    masked = timeit(lambda: cam.explain(photo, top_k=1), args.repeat) / 512  # 512 channels
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"one Score-CAM masked image (resnet18 layer4, 299x224): {masked * 1000:.1f} ms\n")
    print("| positions | eigensolve (s) | x a masked image | estimate |")
    print("| --- | --- | --- | --- |")
    for n in (150, 250, 475, 700, 1000, 1400, 2000):
        a = torch.randn(1, 64, 1, n)
        s = timeit(lambda a=a: kernel_pca(a), args.repeat)
        print(f"| {n:,} | {s:.3f} | {s / masked:.2f} | {max(1.0, (n / KPCA_POSITIONS_PER_PASS) ** 3):.2f} |")


if __name__ == "__main__":
    main()
