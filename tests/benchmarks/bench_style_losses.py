"""The style losses alone: forward + backward of each over VGG16_bn's five style layers, at the
feature sizes of a 256 px and a 512 px image (the network's own passes not counted).

    python tests/benchmarks/bench_style_losses.py [--device cpu] [--repeat 5]
    python tests/benchmarks/bench_style_losses.py --eigh      # eigh by thread, with and without one MKL thread

Gram (the engine's loss today) against the Gaussian Wasserstein-2 distance with the trace of the
square root by an eigendecomposition (``eigh``) or by 20 Newton-Schulz iterations, and the sliced
Wasserstein-2 distance with max(8, C / 4) directions (fresh each call, as each step draws them;
the style's projections sorted in the timing too, as each step does). The style's statistics (its covariance's square root, its sorted projections for the
sliced loss' directions) are computed outside the timing, as a run computes them once. Median of
``--repeat``; random features.
"""

from __future__ import annotations

import argparse

import torch
from bench_cam import timeit  # the median timing of the CAM benchmarks (CUDA synchronised)

from nstcam.style.losses.gram import gram, style_loss
from nstcam.style.losses.sliced import random_directions, sliced_w2, sorted_projections
from nstcam.style.losses.wasserstein import feature_stats, gaussian_w2, psd_sqrt

LAYERS = ((64, 1), (128, 2), (256, 4), (512, 8), (512, 16))  # (channels, stride) of relu1_1 ... relu5_1


def _feats(side: int, device: torch.device, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.relu(torch.randn(1, c, side // s, side // s, generator=g)).to(device) for c, s in LAYERS]


def row(side: int, device: torch.device, repeat: int) -> dict[str, float]:
    style, out = _feats(side, device, 0), _feats(side, device, 1)
    names = [f"l{i}" for i in range(len(LAYERS))]
    weights = dict.fromkeys(names, 1.0)
    grams_t = {n: gram(f) for n, f in zip(names, style, strict=True)}
    stats_t = [feature_stats(f) for f in style]
    roots = [psd_sqrt(cov) for _, cov in stats_t]
    gen = torch.Generator().manual_seed(0)

    def run(loss_of) -> float:
        def once() -> None:
            xs = [f.clone().requires_grad_(True) for f in out]
            loss_of(xs).sum().backward()

        return timeit(once, repeat, device)

    def w2(method: str):
        def loss(xs):
            total = 0.0
            for x, (mu_t, cov_t), r in zip(xs, stats_t, roots, strict=True):
                total = total + gaussian_w2(*feature_stats(x), mu_t, cov_t, r, method=method)
            return total

        return loss

    def sliced(xs):
        total = 0.0
        for x, s in zip(xs, style, strict=True):
            d = random_directions(x.shape[1], max(8, x.shape[1] // 4), gen, device)  # as the engine draws
            with torch.no_grad():
                target = sorted_projections(s, d)  # each step projects the style's kept positions
            total = total + sliced_w2(x, target, d)
        return total

    r = {"side": side}
    r["gram"] = run(
        lambda xs: style_loss({n: gram(x) for n, x in zip(names, xs, strict=True)}, grams_t, weights)
    )
    r["w2 eigh"] = run(w2("eigh"))
    r["w2 newton-schulz"] = run(w2("newton-schulz"))
    r["sliced"] = run(sliced)
    return r


def eigh_rows(repeat: int) -> list[dict]:
    """Milliseconds of a CPU ``eigh`` of (C, C) covariances, called from the main thread and from a
    worker thread, as torch runs it and with one MKL thread (``nstcam._lapack.eigh``)."""
    from concurrent.futures import ThreadPoolExecutor

    from nstcam._lapack import eigh

    cpu, rows = torch.device("cpu"), []
    with ThreadPoolExecutor(1) as pool:
        for c in (256, 512):
            a = torch.randn(1, c, c + 88, generator=torch.Generator().manual_seed(c))
            m = a @ a.transpose(1, 2) / a.shape[-1]
            r = {"c": c}
            for name, fn in (("torch", torch.linalg.eigh), ("one MKL thread", eigh)):
                r[f"{name}, main"] = 1000 * timeit(lambda fn=fn: fn(m), repeat, cpu)
                r[f"{name}, worker"] = 1000 * pool.submit(timeit, lambda fn=fn: fn(m), repeat, cpu).result()
            rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--eigh", action="store_true", help="only the eigh-by-thread table (CPU)")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    print(f"device: {device} ({torch.get_num_threads()} threads), torch {torch.__version__}")
    if a.eigh:
        rows = eigh_rows(a.repeat)
        keys = [k for k in rows[0] if k != "c"]
        print("| C | " + " | ".join(f"{k} (ms)" for k in keys) + " |\n" + "| --- " * (1 + len(keys)) + "|")
        for r in rows:
            print(f"| {r['c']} | " + " | ".join(f"{r[k]:.1f}" for k in keys) + " |")
        return
    rows = [row(side, device, a.repeat) for side in (256, 512)]
    keys = ["gram", "w2 eigh", "w2 newton-schulz", "sliced"]
    print(
        "| image | "
        + " | ".join(f"{k} (ms)" for k in keys)
        + " | "
        + " | ".join(f"{k} / gram" for k in keys[1:])
        + " |"
    )
    print("| --- " * (1 + 2 * len(keys) - 1) + "|")
    for r in rows:
        ms = " | ".join(f"{1000 * r[k]:.1f}" for k in keys)
        ratios = " | ".join(f"{r[k] / r['gram']:.2f}" for k in keys[1:])
        print(f"| {r['side']} px | {ms} | {ratios} |")


if __name__ == "__main__":
    main()
