"""Throughput of stylize_dataset on Ray Data against stylize_batch, on this machine.

    python tests/benchmarks/bench_distributed.py [--images 8 --size 96 --steps 20]
    python tests/benchmarks/bench_distributed.py --gpus-per-worker 1 --size 512 --steps 300 --weights imagenet

Prints the local Ray start-up time, then images per second for ``stylize_batch`` (one process, no
Ray) and for ``stylize_dataset`` with 1 and 2 workers (CPU) or one worker per GPU; every run starts
from an empty output folder, and worker start-up (engine and style targets) is included, as a user
meets it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=8)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--weights", default="random")
    p.add_argument("--gpus-per-worker", type=float, default=0)
    a = p.parse_args()
    import ray

    from nstcam import StyleTransfer
    from nstcam.distributed import stylize_dataset

    t = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    start = time.perf_counter() - t
    cpus = int(ray.cluster_resources().get("CPU", 1))
    gpus = int(ray.cluster_resources().get("GPU", 0))
    kw = dict(size=a.size, steps=a.steps, seed=0, optimizer="adam")
    with tempfile.TemporaryDirectory() as d:
        inp = Path(d) / "in"
        inp.mkdir()
        rng = np.random.default_rng(0)
        for i in range(a.images):
            Image.fromarray((rng.random((a.size * 3 // 4, a.size, 3)) * 255).astype(np.uint8)).save(
                inp / f"{i}.png"
            )
        style = Path(d) / "style.png"
        Image.fromarray((rng.random((a.size, a.size, 3)) * 255).astype(np.uint8)).save(style)
        rows = []
        device = "cuda" if a.gpus_per_worker else "cpu"
        t = time.perf_counter()
        st = StyleTransfer(a.weights, device=device)
        st.stylize_batch(inp, style, Path(d) / "local", progress_bar=False, **kw)
        rows.append(("stylize_batch, one process", a.images / (time.perf_counter() - t)))
        counts = [max(1, gpus // max(1, int(a.gpus_per_worker)))] if a.gpus_per_worker else [1, 2]
        for n in counts:
            t = time.perf_counter()
            res = stylize_dataset(
                inp, style, Path(d) / f"ray{n}", num_workers=n, gpus_per_worker=a.gpus_per_worker,
                weights=a.weights, **kw,
            )  # fmt: skip
            assert len(res.written) == a.images, res.failed
            rows.append(
                (f"stylize_dataset, {n} worker{'s' if n > 1 else ''}", a.images / (time.perf_counter() - t))
            )
    hw = torch.cuda.get_device_name() if gpus else f"{cpus} CPUs"
    print(f"{hw}, torch {torch.__version__}, weights {a.weights}; local Ray start {start:.1f} s")
    print(f"{a.images} images of {a.size} px x {a.steps} Adam steps\n")
    print("| run | images/s | vs stylize_batch |")
    print("| --- | --- | --- |")
    for name, v in rows:
        print(f"| {name} | {v:.2f} | {v / rows[0][1]:.2f}x |")


if __name__ == "__main__":
    main()
