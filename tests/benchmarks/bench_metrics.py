"""Faithfulness of every CAM method on the sample images, beside maps with no information, and
what each metric costs per image.

    python tests/benchmarks/bench_metrics.py [--arch resnet50 --weights imagenet --device cuda]

For each content sample (astronaut, chelsea, coffee, rocket) and each method, the top-1 class's
map at the network input (shorter side ``--input-size``) is scored by nstcam.metrics; the table
holds the mean over the images. "random map" (seed 0) and "centre Gaussian" are the baselines.
With ``--weights random`` (the default here: no weights can be downloaded on the machines that
wrote this) the network's classes mean nothing, and neither do these figures beyond cost: say so.
A method that cannot explain the model (LeGrad on a CNN) gets a row saying why; SS-CAM and IS-CAM
run with ``--samples`` samples (default 2: each is a Score-CAM per sample).
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import median_seconds

from nstcam import GradCAM, load_image
from nstcam.cam import METHODS
from nstcam.metrics import (
    centre_gaussian,
    confidence_change,
    deletion_auc,
    faithfulness,
    insertion_auc,
    random_map,
    road,
)

SAMPLES = "nstcam/assets/samples"
IMAGES = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--arch", default=None, help="default resnet50 on CUDA, resnet18 on CPU")
    p.add_argument("--input-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--samples", type=int, default=2, help="SS-CAM and IS-CAM samples")
    p.add_argument(
        "--imputation", action="store_true", help="print only ROAD's imputation against a converged solve"
    )
    a = p.parse_args()
    if a.imputation:
        imputation_table()
        return
    device = torch.device(a.device)
    arch = a.arch or ("resnet50" if device.type == "cuda" else "resnet18")
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(
        f"device: {device} ({hw}), torch {torch.__version__}, {arch}, weights: {a.weights}, "
        f"input {a.input_size} px, {a.steps} steps, {len(IMAGES)} images"
    )
    if a.weights == "random":
        print("RANDOM weights: the classes mean nothing; read these figures for cost, not for quality.")
    base = GradCAM(arch, weights=a.weights, device=device, input_size=a.input_size)
    xs = [base.preprocess(load_image(f"{SAMPLES}/{name}")) for name in IMAGES]
    keys = ("confidence_change", "deletion_auc", "insertion_auc", "road")
    rows, seconds = {}, {}
    for method in a.methods.split(","):
        kw = {"n_samples": a.samples} if method in ("sscam", "iscam") else {}
        try:
            cam = GradCAM(model=base.model, method=method, device=device, input_size=a.input_size, **kw)
        except ValueError as e:
            rows[method] = f"not for {arch}: {str(e).split(':')[0]}"
            continue
        per, took = [], 0.0
        for x in xs:
            t = time.perf_counter()
            maps = cam.compute(x)  # top-1 class, at the input's size
            took += time.perf_counter() - t
            cls = int(base.model(x).argmax())
            per.append(faithfulness(base.model, x, maps, cls, steps=a.steps)[0])
        rows[method] = [sum(getattr(f, k) for f in per) / len(per) for k in keys]
        seconds[method] = took / len(xs)
    for name, make in (
        ("random map", lambda x: random_map(1, *x.shape[-2:], seed=0, device=device)),
        ("centre Gaussian", lambda x: centre_gaussian(1, *x.shape[-2:], device=device)),
    ):
        per = [
            faithfulness(base.model, x, make(x), int(base.model(x).argmax()), steps=a.steps)[0] for x in xs
        ]
        rows[name] = [sum(getattr(f, k) for f in per) / len(per) for k in keys]
    print("\n| map | confidence change (+) | deletion AUC (-) | insertion AUC (+) | ROAD (+) | map s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, vals in rows.items():
        if isinstance(vals, str):
            print(f"| {name} | {vals} | | | | |")
            continue
        took = f"{seconds[name]:.3f}" if name in seconds else ""
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {took} |")

    # cost per image of each metric, on the first image and its Grad-CAM map
    x = xs[0]
    maps = base.compute(x)
    cls = int(base.model(x).argmax())

    def timed(fn):
        return median_seconds(fn, device)

    costs = {
        "Grad-CAM map itself": (lambda: base.compute(x), 2),
        "confidence change": (lambda: confidence_change(base.model, x, maps, cls), 2),
        f"deletion AUC ({a.steps} steps)": (
            lambda: deletion_auc(base.model, x, maps, cls, steps=a.steps),
            a.steps + 2,
        ),
        f"insertion AUC ({a.steps} steps)": (
            lambda: insertion_auc(base.model, x, maps, cls, steps=a.steps),
            a.steps + 2,
        ),
        "ROAD (9 percentiles, MoRF + LeRF)": (lambda: road(base.model, x, maps, cls), 19),
        "all four (faithfulness)": (
            lambda: faithfulness(base.model, x, maps, cls, steps=a.steps),
            2 * a.steps + 2 * 9 + 4,
        ),
    }
    print("\n| metric, one image | forward passes | seconds |")
    print("| --- | --- | --- |")
    for name, (fn, passes) in costs.items():
        print(f"| {name} | {passes} | {timed(fn):.3f} |")


def imputation_table():
    """ROAD's cascaded imputation (the default) against conjugate gradients run to convergence
    (relative residual 1e-9) on a smooth random 224 px image, in normalised units."""
    from nstcam.metrics._impute import linear_impute

    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.avg_pool2d(torch.randn(2, 3, 224, 224, generator=g), 9, 1, 4) * 3
    yy, xx = torch.meshgrid(torch.arange(224), torch.arange(224), indexing="ij")
    block = torch.zeros(2, 1, 224, 224, dtype=torch.bool)
    block[..., 20:200, 20:200] = True
    blob = torch.exp(-((yy - 80) ** 2 + (xx - 120) ** 2) / (2 * 60.0**2))
    morf = (blob >= blob.flatten().quantile(0.1)).expand(2, 1, 224, 224)
    print(f"image std {float(x.std()):.3f}; ROAD adds noise of std 0.01")
    print("\n| removed | share | seconds (2 images) | mean abs error | max abs error |")
    print("| --- | --- | --- | --- | --- |")
    for name, removed in (("a 180 x 180 square", block), ("the top 90 % of a smooth map", morf)):
        exact = linear_impute(x, removed, tol=1e-9, max_iter=15000, cascade=False)
        t = time.perf_counter()
        fast = linear_impute(x, removed)
        dt = time.perf_counter() - t
        err = (fast - exact).abs()[removed.expand_as(x)]
        print(
            f"| {name} | {float(removed.float().mean()):.2f} | {dt:.2f} | {float(err.mean()):.4f} | "
            f"{float(err.max()):.4f} |"
        )


if __name__ == "__main__":
    main()
