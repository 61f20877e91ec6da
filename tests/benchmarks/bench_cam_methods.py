"""Every CAM method against pytorch-grad-cam 1.5.7 and torch-cam 0.5.0, where they have it too.

    pip install grad-cam==1.5.7 torchcam==0.5.0 && python tests/benchmarks/bench_cam_methods.py

Seeded random resnet18 (vit_b_16 for LeGrad), 224 px, each method's default layer (layer4; LeGrad:
the last encoder block), one target class; median latency of one image and throughput on a batch
(``--batch``, gradient and gradient-free methods only: the perturbation methods score one forward
pass per channel, 512 per image here, so they are timed at batch 1, SS-CAM and IS-CAM with
``--samples`` samples in every library). "nstcam / best" divides nstcam's latency by the faster
library's; "nstcam / forward" by one plain forward pass. A library without the method shows "-".
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from nstcam import GradCAM, build_model
from nstcam.cam import METHOD_INFO

TARGET = 281


def timeit(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pgc_runner(method, model, layer, samples):
    """A callable (x) -> maps of pytorch-grad-cam's ``method``, or None where it has none."""
    try:
        import pytorch_grad_cam as pgc
        from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
    except ImportError:
        return None
    classes = {
        "gradcam": pgc.GradCAM, "gradcam++": pgc.GradCAMPlusPlus, "xgradcam": pgc.XGradCAM,
        "layercam": pgc.LayerCAM, "hirescam": pgc.HiResCAM, "gradcam-elementwise": pgc.GradCAMElementWise,
        "eigengradcam": pgc.EigenGradCAM, "segeigencam": pgc.SegEigenCAM, "randomcam": pgc.RandomCAM,
        "shapleycam": pgc.ShapleyCAM, "eigencam": pgc.EigenCAM, "fem": pgc.FEM, "kpcacam": pgc.KPCA_CAM,
        "scorecam": pgc.ScoreCAM, "ablationcam": pgc.AblationCAM, "fullgrad": pgc.FullGrad,
    }  # fmt: skip
    if method == "finercam":
        cam = pgc.FinerCAM(model, [layer])
        return lambda x: cam(x, targets=None)
    if method == "guided-backprop":
        gb = pgc.GuidedBackpropReLUModel(copy.deepcopy(model), device="cpu")
        return lambda x: [gb(x[i : i + 1], target_category=TARGET) for i in range(len(x))]
    if method not in classes:
        return None
    cam = classes[method](model=model, target_layers=[] if method == "fullgrad" else [layer])

    def run(x):
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(TARGET)] * len(x))

    return run


def torchcam_runner(method, model, layer_name, samples):
    """A callable (x) -> maps of torch-cam's ``method``, or None where it has none."""
    try:
        from torchcam import methods as tcm
    except ImportError:
        return None
    classes = {
        "gradcam": tcm.GradCAM, "gradcam++": tcm.GradCAMpp, "smoothgradcam++": tcm.SmoothGradCAMpp,
        "xgradcam": tcm.XGradCAM, "layercam": tcm.LayerCAM, "cam": tcm.CAM, "scorecam": tcm.ScoreCAM,
        "sscam": tcm.SSCAM, "iscam": tcm.ISCAM, "legrad": tcm.LeGrad,
    }  # fmt: skip
    if method not in classes:
        return None
    kw = {"num_samples": samples} if method in ("sscam", "iscam") else {}
    if method == "cam":
        kw = {"fc_layer": "fc"}
    extractor = classes[method](model, layer_name, **kw)
    gradient = method not in ("cam", "scorecam", "sscam", "iscam")

    def run(x):
        with torch.set_grad_enabled(gradient):
            scores = model(x)
        return extractor(class_idx=[TARGET] * len(x), scores=scores)

    return run, extractor


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--samples", type=int, default=2, help="SS-CAM / IS-CAM samples, every library")
    p.add_argument("--methods", help="comma-separated; default every method")
    a = p.parse_args()
    torch.manual_seed(0)
    res = build_model("resnet18", "random").eval()
    vit = build_model("vit_b_16", "random").eval()
    methods = a.methods.split(",") if a.methods else list(METHOD_INFO)
    print(
        f"device: cpu ({torch.get_num_threads()} threads), torch {torch.__version__}, random weights, 224 px"
    )
    print(
        "\n| method | family | nstcam ms | pytorch-grad-cam ms | torch-cam ms | nstcam / best | nstcam / forward "
        f"| batch {a.batch}: nstcam img/s | pgc img/s | torch-cam img/s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for method in methods:
        info = METHOD_INFO[method]
        model = vit if method == "legrad" else res
        layer_name = "encoder.layers.encoder_layer_11" if method == "legrad" else "layer4"
        x1 = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        xb = torch.randn(a.batch, 3, 224, 224, generator=torch.Generator().manual_seed(2))
        kw = {"n_samples": a.samples} if method in ("sscam", "iscam") else {}
        ours = GradCAM(model=model, target_layer=layer_name, method=method, device="cpu", **kw)
        perturb = info.family == "perturbation"
        rep = 1 if perturb else a.repeat

        def fwd(x, model=model):
            with torch.no_grad():
                model(x)

        f1 = timeit(lambda: fwd(x1), a.repeat)
        o1 = timeit(lambda: ours.compute(x1, targets=TARGET), rep)
        ob = None if perturb else timeit(lambda: ours.compute(xb, targets=TARGET), max(1, rep // 2))
        cells = {}
        layer = dict(model.named_modules())[layer_name]
        runners = {"pgc": pgc_runner(method, model, layer, a.samples)}
        tc = torchcam_runner(method, model, layer_name, a.samples)
        runners["tc"], extractor = tc if tc is not None else (None, None)
        for name, run in runners.items():
            if run is None:
                continue
            cells[name] = timeit(lambda run=run: run(x1), rep)
            if not perturb and method != "guided-backprop":
                cells[name + "b"] = timeit(lambda run=run: run(xb), max(1, rep // 2))
        if extractor is not None:
            extractor.remove_hooks()
        best = min((cells[k] for k in ("pgc", "tc") if k in cells), default=None)

        def ms(k):
            return f"{cells[k] * 1e3:.1f}" if k in cells else "-"

        def ips(k):
            return f"{a.batch / cells[k]:.1f}" if k in cells else "-"

        print(
            f"| {method} | {info.family} | {o1 * 1e3:.1f} | {ms('pgc')} | {ms('tc')} | "
            f"{f'{o1 / best:.2f}x' if best else '-'} | {o1 / f1:.2f}x | "
            f"{f'{a.batch / ob:.1f}' if ob else '-'} | {ips('pgcb')} | {ips('tcb')} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
