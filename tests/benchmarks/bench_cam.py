"""Grad-CAM benchmark: nstcam vs pytorch-grad-cam (benchmark-only dependency) vs a plain forward.

    pip install grad-cam && python tests/benchmarks/bench_cam.py [--device cuda] [--weights imagenet]

Same model object, same 224 px input, same target class; latency is the median of ``--repeat`` runs
of one image, throughput is images/s on a batch of ``--batch``. "nstcam" is the engine's default:
on CUDA that replays captured CUDA graphs, and a second table compares it with the eager pass
(``cuda_graphs=False``) at batch 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nstcam import GradCAM, build_model


def timeit(fn, repeat, device):
    fn()  # warm-up
    fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--archs", default="resnet18,resnet50")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    device = torch.device(a.device)
    from pytorch_grad_cam import GradCAM as PGC
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}, 224 px")
    print(
        "\n| model | forward (no grad) ms | nstcam ms | pytorch-grad-cam ms | nstcam / pgc | nstcam / forward "
        f"| batch {a.batch}: forward img/s | nstcam img/s | pgc img/s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    graph_rows = []
    for arch in a.archs.split(","):
        model = build_model(arch, a.weights).to(device).eval()
        ours = GradCAM(model=model, target_layer="layer4", device=device)
        theirs = PGC(model=model, target_layers=[model.layer4])
        torch.manual_seed(0)
        x1 = torch.randn(1, 3, 224, 224, device=device)
        xb = torch.randn(a.batch, 3, 224, 224, device=device)
        t1 = [ClassifierOutputTarget(281)]
        tb = [ClassifierOutputTarget(281)] * a.batch

        def fwd(x):
            with torch.no_grad():
                model(x)

        r = {}
        r["fwd1"] = timeit(lambda: fwd(x1), a.repeat, device)
        r["ours1"] = timeit(lambda: ours.compute(x1, targets=281), a.repeat, device)
        r["pgc1"] = timeit(lambda: theirs(input_tensor=x1, targets=t1), a.repeat, device)
        rb = max(2, a.repeat // 3)
        r["fwdb"] = timeit(lambda: fwd(xb), rb, device)
        r["oursb"] = timeit(lambda: ours.compute(xb, targets=281), rb, device)
        r["pgcb"] = timeit(lambda: theirs(input_tensor=xb, targets=tb), rb, device)
        # the two implementations agree on the map
        m_ours = ours.compute(x1, targets=281)[0].cpu().numpy()
        m_pgc = theirs(input_tensor=x1, targets=t1)[0]
        agree = abs(m_ours - m_pgc).max()
        print(
            f"| {arch} | {r['fwd1'] * 1e3:.1f} | {r['ours1'] * 1e3:.1f} | {r['pgc1'] * 1e3:.1f} | "
            f"{r['ours1'] / r['pgc1']:.2f}x | {r['ours1'] / r['fwd1']:.2f}x | {a.batch / r['fwdb']:.1f} | "
            f"{a.batch / r['oursb']:.1f} | {a.batch / r['pgcb']:.1f} |   (max |map difference| {agree:.3g})"
        )
        theirs.activations_and_grads.release()
        if device.type == "cuda":
            eager = GradCAM(model=model, target_layer="layer4", device=device, cuda_graphs=False)
            t_eager = timeit(lambda: eager.compute(x1, targets=281), a.repeat, device)
            diff = float((eager.compute(x1, targets=281) - ours.compute(x1, targets=281)).abs().max())
            graph_rows.append(
                f"| {arch} | {r['fwd1'] * 1e3:.2f} | {t_eager * 1e3:.2f} | {r['ours1'] * 1e3:.2f} | "
                f"{r['ours1'] / r['fwd1']:.2f}x | {diff:.2g} |"
            )
    if graph_rows:
        print(
            "\n| model, batch 1 | forward (no grad) ms | nstcam eager ms | nstcam CUDA graph ms "
            "| graph / forward | max |graph - eager| |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        print("\n".join(graph_rows))
    else:
        print("\n(CUDA-graph rows: run with --device cuda)")


if __name__ == "__main__":
    main()
