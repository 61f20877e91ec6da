"""The compiled style step's run-time self-check: how closely compiled and eager agree, and its cost.

    python tests/benchmarks/bench_selfcheck.py                 # CPU (inductor), random weights
    python tests/benchmarks/bench_selfcheck.py --device cuda   # CUDA graphs
    python tests/benchmarks/bench_selfcheck.py --tf32          # CPU: TF32 convolutions simulated

Prints three tables:

1. For each style loss, over output sizes and style shapes: the largest relative error of the loss
   terms and of the image gradient, and the smallest gradient cosine, between the compiled step and
   eager, as the self-check measures them, beside the tolerance it applies (``StyleLoss.check``).
2. How exact each loss is in float32 at all: the eager loss and gradient in float32 against float64
   on the same network, images and targets (the Gaussian W2 loss is a difference of nearly
   cancelling traces).
3. What the self-check costs per new key: the first check (torch.compile's compilation included),
   the second, and one compiled step, in seconds.

With ``--app-keys SIZE`` it prints one table instead: the web app's start-up warm-up
(``Models.warm`` at ``max_size`` SIZE: its four keys, 3:2, 1:1, 2:3 and 4:3) on one compiled
engine, each key's self-check (``tests/test_selfcheck.py`` warms the first, ``warmup(96, 64)``'s,
issue 48's; a key costs 15-35 s of inductor's C++ on 2 cores with a cold cache).

With ``--tf32`` it prints one table instead: the same errors where the "compiled" step is the eager
step with its convolutions in TF32 (``tests/_tf32.py``: what an NVIDIA GPU from compute capability
8.0 runs by default) against the float32 eager step, beside the float32 and TF32 tolerances: how
far TF32 alone moves a step, which the first GPU run (an H200) met as a self-check mismatch on every
key.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import pattern

import nstcam.style._compiled as C
import nstcam.style._selfcheck as S
from nstcam import StyleTransfer
from nstcam.image import image_to_tensor, normalize
from nstcam.style.losses import style_loss_named
from nstcam.style.losses.gram import gram
from nstcam.style.losses.gram import style_loss as gram_loss
from nstcam.style.losses.wasserstein import augmented, feature_stats, w2_style_loss, w2_target
from nstcam.style.vgg import layer_index

LOSSES = ("gram", "sliced", "wasserstein")
KW = dict(optimizer="adam", seed=0)  # the default layers


def agreement(device: str, sizes: list[int], styles: int) -> dict:
    """Each loss' worst compiled-versus-eager errors over ``sizes`` and ``styles`` style shapes."""
    worst: dict = defaultdict(
        lambda: {"terms": 0.0, "grad": 0.0, "cos": 1.0, "n": 0, "f32": S.Tolerance(0.0, 0.0, 1.0)}
    )
    current = {"loss": "", "checking": False}  # only the checks' comparisons, not the float64 reference's
    terms_error, gradient_error = S._terms_error, S._gradient_error
    check_step, float32_error = C.check_step, C.float32_error

    def terms(*a):
        v = terms_error(*a)
        w = worst[current["loss"]]
        if current["checking"]:
            w["terms"], w["n"] = max(w["terms"], v), w["n"] + 1
        return v

    def grad(*a):
        v = gradient_error(*a)
        w = worst[current["loss"]]
        if current["checking"]:
            w["grad"], w["cos"] = max(w["grad"], v[0]), min(w["cos"], v[1])
        return v

    def checking(*a, **k):
        current["checking"] = True
        try:
            return check_step(*a, **k)
        finally:
            current["checking"] = False

    def measured(*a, **k):  # the eager step's float32 error, which widens the check's tolerance
        e, w = float32_error(*a, **k), worst[current["loss"]]
        f = w["f32"]
        w["f32"] = S.Tolerance(max(f.terms, e.terms), max(f.grad, e.grad), min(f.cosine, e.cosine))
        return e

    S._terms_error, S._gradient_error = terms, grad
    C.check_step, C.float32_error = checking, measured
    mismatches = {}
    try:
        eager = StyleTransfer("random", device=device)
        for loss in LOSSES:
            current["loss"] = loss
            engine = StyleTransfer(model=eager.model, device=device, compile=True)
            for size in sizes:
                for k in range(styles):
                    content, style = pattern(1 + k, 48, 32), pattern(5 + k, 40 + 8 * k, 40)
                    engine.stylize(content, style, size=size, style_loss=loss, steps=1, **KW)
            mismatches[loss] = engine.compile_stats["mismatches"]
    finally:
        S._terms_error, S._gradient_error = terms_error, gradient_error
        C.check_step, C.float32_error = check_step, float32_error
    for loss in LOSSES:
        worst[loss]["mismatches"] = mismatches[loss]
    return worst


def tf32_agreement(sizes: list[int], styles: int) -> dict:
    """:func:`agreement` where the compiled step is the eager one with TF32 convolutions (CPU)."""
    from _tf32 import tf32_convs

    from nstcam.hooks import twin

    real_twin, real_compile = C.twin, torch.compile
    C.twin = lambda net: tf32_convs(twin(net))
    torch.compile = lambda fn, **kw: fn
    try:
        return agreement("cpu", sizes, styles)
    finally:
        C.twin, torch.compile = real_twin, real_compile


def float32_error(sizes: list[int], seeds: int) -> dict:
    """Gram and W2 losses (5 layers) in float32 against float64, eager on CPU: worst relative errors."""
    names = ["relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1"]
    taps = {layer_index(n): n for n in names}
    weights = {n: 1.0 for n in names}
    net32 = StyleTransfer("random", device="cpu").net
    nets = {torch.float32: net32, torch.float64: copy.deepcopy(net32).double()}
    out: dict = defaultdict(lambda: {"terms": 0.0, "grad": 0.0})
    for size in sizes:
        for seed in range(seeds):
            x = image_to_tensor(pattern(1 + seed, size * 3 // 2, size))
            s = image_to_tensor(pattern(5 + seed, 40, 40))
            fs = C.tap_features(net32, normalize(s), taps)  # one set of targets (float32) for both
            w2_targets = {n: w2_target(gram(augmented(fs[n]))) for n in names}
            gram_targets = {n: gram(fs[n]) for n in names}
            got = {}
            for dt, net in nets.items():
                xg = x.to(dt).clone().requires_grad_(True)
                f = C.tap_features(net, normalize(xg), taps)
                w2t = {n: tuple(t.to(dt) for t in w2_targets[n]) for n in names}
                w2 = w2_style_loss({n: feature_stats(f[n]) for n in names}, w2t, weights)
                g = gram_loss(
                    {n: gram(f[n]) for n in names}, {n: gram_targets[n].to(dt) for n in names}, weights
                )
                for name, value in (("gram", g), ("wasserstein", w2)):
                    (grad,) = torch.autograd.grad(value.sum(), xg, retain_graph=True)
                    got[(name, dt)] = (value.detach().double(), grad.double())
            for name in ("gram", "wasserstein"):
                (v32, g32), (v64, g64) = got[(name, torch.float32)], got[(name, torch.float64)]
                o = out[name]
                o["terms"] = max(o["terms"], float(((v32 - v64).abs() / v64.abs()).max()))
                o["grad"] = max(o["grad"], float((g32 - g64).norm() / g64.norm()))
    return out


def _timed(fn, seconds: list[float]):
    """``fn``, appending each call's seconds to ``seconds``."""

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            seconds.append(time.perf_counter() - t)

    return timed


def cost(device: str, size: int) -> dict:
    """Seconds: the first check of a new key (compilation included), the second, the float64
    reference that sets their tolerance, a compiled step."""
    times: list[float] = []
    exact: list[float] = []
    real, real_error = C.check_step, C.float32_error
    C.check_step, C.float32_error = _timed(real, times), _timed(real_error, exact)
    try:
        engine = StyleTransfer("random", device=device, compile=True)
        content, style = pattern(1, 48, 32), pattern(2, 40, 40)
        engine.stylize(content, style, size=size, steps=1, **KW)
        runs = {}
        for steps in (5, 25):
            t = time.perf_counter()
            engine.stylize(content, style, size=size, steps=steps, **KW)
            runs[steps] = time.perf_counter() - t
    finally:
        C.check_step, C.float32_error = real, real_error
    return {"first": times[0], "second": times[1], "exact": exact[0], "step": (runs[25] - runs[5]) / 20}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sizes", default="32,48,64,96")
    p.add_argument("--styles", type=int, default=2, help="style shapes per size (the sliced loss' key)")
    p.add_argument("--cost-size", type=int, default=128)
    p.add_argument("--tf32", action="store_true", help="only the TF32 table (CPU, simulated)")
    p.add_argument("--app-keys", type=int, metavar="SIZE", help="only the app's warm-up keys at this max size")
    a = p.parse_args(argv)
    sizes = [int(v) for v in a.sizes.split(",")]
    torch.manual_seed(0)
    if a.app_keys:
        return app_keys(a.app_keys)
    if a.tf32:
        print(f"device: cpu, torch {torch.__version__}, random weights (VGG16_bn seed 0)\n")
        return tf32_table(sizes, a.styles)
    print(f"device: {a.device}, torch {torch.__version__}, random weights (VGG16_bn seed 0)\n")
    rows = agreement(a.device, sizes, a.styles)
    print(f"Compiled against eager, sizes {a.sizes} px, {a.styles} style shapes each (2 checks per key):\n")
    print(
        "| loss | checks | worst terms rel | worst gradient rel L2 | lowest cosine | tolerance "
        "| eager float32 error (worst) | tolerance it sets (loosest) | mismatches |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for loss in LOSSES:
        r, tol = rows[loss], S.tolerance(False, style_loss_named(loss).check)
        f32, wide = r["f32"], S.widened(tol, r["f32"])
        print(
            f"| {loss} | {r['n']} | {r['terms']:.2e} | {r['grad']:.2e} | {r['cos']:.7f} | "
            f"{tol.terms:g}, {tol.grad:g}, {tol.cosine:g} | {f32.terms:.1e}, {f32.grad:.1e}, {f32.cosine:.7f} | "
            f"{wide.terms:g}, {wide.grad:g}, {wide.cosine:g} | {r['mismatches']} |"
        )
    f32 = float32_error([32, 64, 128], 3)
    print("\nEager float32 against float64 (5 layers, 32-128 px, 3 images each):\n")
    print("| loss | worst terms rel | worst gradient rel L2 |")
    print("| --- | --- | --- |")
    for loss, r in f32.items():
        print(f"| {loss} | {r['terms']:.2e} | {r['grad']:.2e} |")
    c = cost(a.device, a.cost_size)
    print(f"\nSelf-check cost at {a.cost_size} px (gram), seconds:\n")
    print(
        "| first check (compilation included) | second check | float64 reference | one compiled step "
        "| all without compiling |"
    )
    print("| --- | --- | --- | --- | --- |")
    extra = 2 * c["second"] + c["exact"]
    print(
        f"| {c['first']:.2f} | {c['second']:.3f} | {c['exact']:.3f} | {c['step']:.3f} "
        f"| {extra:.3f} ({extra / c['step']:.1f} steps) |"
    )
    return 0


def app_keys(size: int) -> int:
    """The app's warm-up thread on all four of its keys; one row per key, 1 if a key fails its check."""
    from nstcam import build_model
    from nstcam.app import AppConfig, Models

    engine = StyleTransfer(model=build_model("vgg16_bn", "random", seed=0), device="cpu", compile=True)
    models = Models(AppConfig(random_weights=True, device="cpu", max_size=size, max_steps=20))
    models._style = engine
    print(f"device: cpu, torch {torch.__version__}, random weights (VGG16_bn seed 0), the app at {size} px\n")
    print("| key (w x h) | checks | mismatches | failures | torch fallbacks | largest relative error so far | s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    bad = 0
    for w, h in models.warm_sizes():
        before, t = dict(engine.compile_stats), time.perf_counter()
        models.warm_sizes = lambda key=(w, h): [key]  # this instance only: one key at a time
        models.warm().join()
        after = engine.compile_stats
        new = {k: after[k] - before.get(k, 0) for k in ("checked", "mismatches", "failures", "torch_fallbacks")}
        bad += bool(new["mismatches"] or new["failures"] or new["torch_fallbacks"] or not new["checked"])
        print(
            f"| {w} x {h} | {new['checked']} | {new['mismatches']} | {new['failures']} | "
            f"{new['torch_fallbacks']} | {after['max_rel_err']:.2e} | {time.perf_counter() - t:.0f} |"
        )
    return 1 if bad else 0


def tf32_cam_errors(shapes: tuple[tuple[int, int], ...] = ((64, 80), (224, 336)), seeds: int = 3) -> dict:
    """Grad-CAM's raw maps (resnet18, layer4, class 3) with TF32 convolutions against float32, as the
    graphs' self-check measures them (``error_of_max``): the worst over ``seeds`` inputs per shape."""
    from _tf32 import tf32_convs

    from nstcam._capture import error_of_max
    from nstcam.cam import GradCAM
    from nstcam.hooks import twin

    exact = GradCAM("resnet18", weights="random", device="cpu")
    tf32 = GradCAM(model=tf32_convs(twin(exact.model)), device="cpu")
    worst = {}
    for h, w in shapes:
        xs = [torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(s)) for s in range(seeds)]
        worst[(h, w)] = max(
            error_of_max(tf32.compute(x, targets=3, raw=True), exact.compute(x, targets=3, raw=True))
            for x in xs
        )
    return worst


def tf32_table(sizes: list[int], styles: int) -> int:
    rows = tf32_agreement(sizes, styles)
    print(f"TF32 convolutions (simulated) against float32 eager, sizes {','.join(map(str, sizes))} px, "
          f"{styles} style shapes each:\n")  # fmt: skip
    print("| loss | checks | worst terms rel | worst gradient rel L2 | lowest cosine | float32 tolerance | "
          "TF32 tolerance | passes TF32 |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for loss in LOSSES:
        r = rows[loss]
        strict, loose = (
            S.tolerance(False, style_loss_named(loss).check),
            S.tolerance(False, style_loss_named(loss).check, tf32=True),
        )
        ok = r["terms"] <= loose.terms and r["grad"] <= loose.grad and r["cos"] >= loose.cosine
        print(
            f"| {loss} | {r['n']} | {r['terms']:.2e} | {r['grad']:.2e} | {r['cos']:.6f} | "
            f"{strict.terms:g}, {strict.grad:g}, {strict.cosine:g} | {loose.terms:g}, {loose.grad:g}, {loose.cosine:g} | "
            f"{'yes' if ok else 'NO'} |"
        )
    from nstcam.cam._graphed import CHECK_TOLERANCE, TF32_CHECK_TOLERANCE

    print(
        "\nGrad-CAM raw maps (resnet18, layer4), TF32 convolutions (simulated) against float32, worst of 3 inputs,"
    )
    print(
        f"as the graphs' self-check measures them (tolerance {CHECK_TOLERANCE:g}; TF32 {TF32_CHECK_TOLERANCE:g}):\n"
    )
    print("| input | max difference / max |")
    print("| --- | --- |")
    for (h, w), err in tf32_cam_errors().items():
        print(f"| {h} x {w} | {err:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
