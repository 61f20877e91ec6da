"""The style losses side by side: what each does to the result, judged by a network that was not
optimised, and what a step of each costs.

    python tests/benchmarks/bench_style_dist.py [--device cpu] [--size 128] [--steps 60] [--weights random]
        [--average-steps 60,200,500,1000] [--average-only] [--average-loss gram] [--thread] [--compiled]

Judge: a second VGG16_bn (seed 1; the engine's is seed 0), its relu1_1 ... relu5_1 features of the
result against the style's, three ways: the Gram loss, the Gaussian W2 distance and the sliced W2
distance (64 fixed directions per layer), each relative and averaged over layers as the losses are.
Rows:

- each ``style_loss`` at the same steps (L-BFGS, from the content): the judge's three distances;
- ``average=0.99`` against the last iterate (Adam): the result's total variation (pixel noise) and
  the judge's distances, at ``--steps`` and at each of ``--average-steps`` (the ratios: how the
  average's lag behind a still-descending run shrinks with its length); ``--average-only``: only
  that curve, of ``--average-loss``, at ``--size`` (64 px converges within 1000 steps, 128 px not);
- ``init="style_stats"``: the start image's channel means against the style's;
- cost per step at 256 and 512 px (eager, ``--cost-steps`` each, median), each loss against Gram;
  ``--compiled``: only this table, of the compiled step (``torch.compile``, inductor on a CPU; its
  calls run on the engine's owner thread); ``--thread``: only this table, the eager step called from
  a worker thread, as the app's and a thread pool's calls are; ``--plain-eigh``: either, with
  ``eigh`` as torch runs it (``nstcam/_lapack.py`` disabled: what its one MKL thread fixes).

Random weights unless ``--weights imagenet``: then the distances mean what they say.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image

from nstcam import StyleTransfer, build_model
from nstcam.image import image_to_tensor, normalize
from nstcam.style.losses.gram import gram
from nstcam.style.losses.sliced import random_directions, sliced_w2, sorted_projections
from nstcam.style.losses.terms import total_variation
from nstcam.style.losses.wasserstein import feature_stats, gaussian_w2

SAMPLES = Path(__file__).resolve().parents[2] / "nstcam" / "assets" / "samples"
LAYERS = (2, 9, 16, 26, 36)  # relu1_1 ... relu5_1 of torchvision's vgg16_bn.features


class Judge:
    """Distances of an image's features to the style's in a VGG16_bn of its own."""

    def __init__(self, weights: str, style: torch.Tensor, device: torch.device) -> None:
        self.net = build_model("vgg16_bn", weights, seed=1).features.to(device).eval()
        self.style = self.features(style)
        gen = torch.Generator().manual_seed(0)
        self.dirs = [random_directions(f.shape[1], 64, gen, device) for f in self.style]

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out, h = [], normalize(x)
        for i, m in enumerate(self.net[: LAYERS[-1] + 1]):
            h = m(h)
            if i in LAYERS:
                out.append(h.float())
        return out

    def __call__(self, x: torch.Tensor) -> dict[str, float]:
        feats = self.features(x)
        g = w2 = sl = 0.0
        for f, s, d in zip(feats, self.style, self.dirs, strict=True):
            gs = gram(s)
            g += float((gram(f) - gs).pow(2).sum() / gs.pow(2).sum())
            mu_s, cov_s = feature_stats(s)
            w2 += float(gaussian_w2(*feature_stats(f), mu_s, cov_s)[0] / (s.pow(2).sum(1).mean()))
            ps = sorted_projections(s, d)
            sl += float(sliced_w2(f, ps, d)[0] / ps.pow(2).mean())
        n = len(LAYERS)
        return {"gram": g / n, "w2": w2 / n, "sliced": sl / n}


def _load(name: str, side: int) -> Image.Image:
    img = Image.open(SAMPLES / name).convert("RGB")
    img.thumbnail((side, side))
    return img


def effect_rows(st, judge, content, style, size, steps, device) -> list[dict]:
    rows = []
    for loss in ("gram", "wasserstein", "sliced"):
        out = st.stylize(content, style, size=size, steps=steps, seed=0, style_loss=loss, progress_bar=False)
        rows.append({"run": f"style_loss={loss}", **judge(image_to_tensor(out, device))})
    return rows


def average_rows(st, judge, content, style, size, steps, device, loss: str = "gram") -> list[dict]:
    rows = []
    for avg in (False, 0.99):
        out = st.stylize(content, style, size=size, steps=steps, seed=0, optimizer="adam", average=avg,
                         style_loss=loss, progress_bar=False)  # fmt: skip
        x = image_to_tensor(out, device)
        rows.append({"run": f"adam, average={avg}", "tv": float(total_variation(x)), **judge(x)})
    return rows


def init_row(content, style) -> dict:
    from nstcam.style import StyleOptions
    from nstcam.style._optimize import init_image
    from nstcam.style._plan import make_plan

    plan = make_plan(StyleOptions(init="style_stats", seed=0), n_styles=1)

    class _Cpu:
        device = torch.device("cpu")

    c = image_to_tensor(content)
    x = init_image(_Cpu(), None, c, [style], plan)
    return {
        "start": x.detach().mean((0, 2, 3)).tolist(),
        "style": image_to_tensor(style).mean((0, 2, 3)).tolist(),
    }


def cost_rows(st, content, style, steps: int) -> list[dict]:
    rows = []
    for size in (256, 512):
        r = {"size": size}
        for loss in ("gram", "wasserstein", "sliced"):
            kw = dict(size=size, seed=0, style_loss=loss, optimizer="adam", progress_bar=False)
            st.stylize(content, style, steps=2, **kw)  # warm
            t = time.perf_counter()
            st.stylize(content, style, steps=steps + 1, **kw)
            long = time.perf_counter() - t
            t = time.perf_counter()
            st.stylize(content, style, steps=1, **kw)
            r[loss] = (long - (time.perf_counter() - t)) / steps  # marginal seconds per step
        rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--cost-steps", type=int, default=4)
    p.add_argument("--compiled", action="store_true", help="only the cost table, of the compiled step")
    p.add_argument("--thread", action="store_true", help="only the cost table, called from a worker thread")
    p.add_argument("--plain-eigh", action="store_true",
                   help="eigh as torch runs it, without nstcam._lapack's one MKL thread (what it fixes)")  # fmt: skip
    p.add_argument("--average-steps", default="", help="comma-separated run lengths for the averaging curve")
    p.add_argument("--average-only", action="store_true", help="only the averaging curve")
    p.add_argument("--average-loss", default="gram", help="the style loss of the averaging curve")
    a = p.parse_args(argv)
    if a.plain_eigh:  # single_threaded() finds no MKL symbol: a no-op
        import nstcam._lapack

        nstcam._lapack._mkl_set_local = lambda: None
        print("--plain-eigh: eigh as torch runs it (nstcam._lapack disabled)")
    device = torch.device(a.device)
    st = StyleTransfer(a.weights, device=device)
    if a.thread:
        content, style = _load("chelsea.png", 512), _load("hubble_deep_field.jpg", 512)
        print(f"device: {device}, torch {torch.__version__}; eager step called from a worker thread, cost per "
              f"step (Adam, marginal over {a.cost_steps} steps):")  # fmt: skip
        with ThreadPoolExecutor(1) as pool:
            _cost_table(pool.submit(cost_rows, st, content, style, a.cost_steps).result())
        return
    if a.compiled:  # torch.compile on this device too (inductor; CUDA graphs on CUDA)
        st = StyleTransfer(a.weights, device=device, compile=True)
        content, style = _load("chelsea.png", 512), _load("hubble_deep_field.jpg", 512)
        print(f"device: {device}, torch {torch.__version__}; compiled step, cost per step "
              f"(Adam, marginal over {a.cost_steps} steps; compilation in the warm-up):")  # fmt: skip
        _cost_table(cost_rows(st, content, style, a.cost_steps))
        print("compile_stats:", st.compile_stats)
        return
    content, style = _load("chelsea.png", 512), _load("hubble_deep_field.jpg", 512)
    s = image_to_tensor(style.resize((a.size, round(a.size * style.height / style.width))), device)
    judge = Judge(a.weights, s, device)
    print(
        f"device: {device} ({torch.get_num_threads()} threads), torch {torch.__version__}, weights: {a.weights}"
    )
    if a.average_only:
        _average_curve(st, judge, content, style, a, device)
        return
    print(f"\n{a.size} px, {a.steps} steps, L-BFGS; judge distances to the style (lower is closer):")
    print("| run | judge gram | judge w2 | judge sliced |\n| --- | --- | --- | --- |")
    eff = effect_rows(st, judge, content, style, a.size, a.steps, device)
    for r in eff:
        print(f"| {r['run']} | {r['gram']:.4f} | {r['w2']:.4f} | {r['sliced']:.4f} |")
    g = eff[0]
    print(f"w2 judge: wasserstein / gram = {eff[1]['w2'] / g['w2']:.2f}; "
          f"sliced judge: sliced / gram = {eff[2]['sliced'] / g['sliced']:.2f}")  # fmt: skip
    print(f"\n{a.size} px, {a.steps} steps, Adam: averaging against the last iterate")
    print("| run | total variation | judge gram | judge w2 | judge sliced |\n| --- | --- | --- | --- | --- |")
    av = average_rows(st, judge, content, style, a.size, a.steps, device)
    for r in av:
        print(f"| {r['run']} | {r['tv']:.5f} | {r['gram']:.4f} | {r['w2']:.4f} | {r['sliced']:.4f} |")
    print(f"tv: average / last = {av[1]['tv'] / av[0]['tv']:.2f}; judge w2: {av[1]['w2'] / av[0]['w2']:.2f}")
    if a.average_steps:
        _average_curve(st, judge, content, style, a, device)
    init = init_row(content, style)
    print("\ninit=style_stats: start channel means", [round(v, 3) for v in init["start"]],
          "style's", [round(v, 3) for v in init["style"]])  # fmt: skip
    print(f"\ncost per step (Adam, eager, marginal over {a.cost_steps} steps):")
    _cost_table(cost_rows(st, content, style, a.cost_steps))


def _average_curve(st, judge, content, style, a, device) -> None:
    print(
        f"\naverage / last iterate by run length ({a.size} px, Adam, style_loss={a.average_loss}, same judge):"
    )
    print("| steps | tv | judge gram | judge w2 | judge sliced |\n| --- | --- | --- | --- | --- |")
    for n in (int(v) for v in a.average_steps.split(",")):
        last, avg = average_rows(st, judge, content, style, a.size, n, device, a.average_loss)
        ratios = " | ".join(f"{avg[k] / last[k]:.3f}" for k in ("tv", "gram", "w2", "sliced"))
        print(f"| {n} | {ratios} |")


def _cost_table(rows: list[dict]) -> None:
    print("| size | gram s | wasserstein s | sliced s | wasserstein / gram | sliced / gram |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['size']} | {r['gram']:.3f} | {r['wasserstein']:.3f} | {r['sliced']:.3f} | "
              f"{r['wasserstein'] / r['gram']:.2f} | {r['sliced'] / r['gram']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
