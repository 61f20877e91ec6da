"""Extra cost of subject-aware style transfer over plain style transfer, measured in the same run.

    python tests/benchmarks/bench_subject.py [--size 256 --steps 50 --device cuda --weights imagenet]

Plain: ``StyleTransfer.stylize``. Subject-aware: one Grad-CAM (resnet50), the mask, and the masked
losses, at the same size and steps, without the before/after report (``report=False``); the report
(two more explanations) is timed separately. Median of ``--repeat`` runs each, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nstcam import GradCAM, StyleTransfer, load_image, subject_aware_stylize
from nstcam.subject import recognition_report

SAMPLES = "nstcam/assets/samples"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    device = torch.device(a.device)
    st = StyleTransfer(a.weights, device=device)
    cam = GradCAM("resnet50", weights=a.weights, device=device)
    content = load_image(f"{SAMPLES}/chelsea.png")
    style = load_image(f"{SAMPLES}/hubble_deep_field.jpg")
    kw = dict(size=a.size, steps=a.steps, seed=0)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def plain():
        return st.stylize(content, style, **kw)

    def subject():
        return subject_aware_stylize(content, style, engine=st, cam=cam, report=False, **kw).image

    plain()  # warm-up
    subject()
    times = {"plain": [], "subject-aware": []}
    for _ in range(a.repeat):
        for name, fn in (("plain", plain), ("subject-aware", subject)):
            sync()
            t = time.perf_counter()
            out = fn()
            sync()
            times[name].append(time.perf_counter() - t)
    t = time.perf_counter()
    rep = recognition_report(content, out, cam)
    t_report = time.perf_counter() - t
    tp, ts = statistics.median(times["plain"]), statistics.median(times["subject-aware"])
    hw = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(
        f"device: {device} ({hw}), torch {torch.__version__}, weights: {a.weights}, "
        f"{a.size} px, {a.steps} steps, median of {a.repeat}"
    )
    print("\n| run | seconds | extra over plain |")
    print("| --- | --- | --- |")
    print(f"| plain stylize | {tp:.2f} | |")
    print(f"| subject-aware (Grad-CAM + mask + masked losses) | {ts:.2f} | {100 * (ts / tp - 1):+.1f} % |")
    print(f"| before/after report (optional) | {t_report:.2f} | |")
    print(f"\nreport: {rep.summary()}")


if __name__ == "__main__":
    main()
