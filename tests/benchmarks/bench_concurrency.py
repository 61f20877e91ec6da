"""Two users on one engine: two threads calling it at once against the same two calls in sequence.

    python tests/benchmarks/bench_concurrency.py [--size 128 --steps 30 --device cuda --weights imagenet]

For each workload, "sequential" runs call A then call B on one engine; "2 threads" starts both at
once on the same engine (re-entrant: each call's hooks see only its own passes). Both orders
alternate ``--repeat`` times in one process and the medians are printed, with a check that the
threaded results equal the sequential ones (bit-identical on CPU). A ratio at or under 1.00 means
concurrency costs no throughput; on a GPU two calls may overlap and the ratio falls below 1.
Workloads: style transfer (two contents, ``--size``, ``--steps``), Grad-CAM (``--cam-calls``
explanations of one 224 px image per thread, resnet50, two GradCAMs on one network at layer4 and
layer3) and subject-aware style transfer (Grad-CAM + masked losses, with the report).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np
import torch

from nstcam import GradCAM, StyleTransfer, build_model, load_image, subject_aware_stylize

SAMPLES = "nstcam/assets/samples"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--weights", default="random")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--cam-calls", type=int, default=8)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    device = torch.device(a.device)
    st = StyleTransfer(a.weights, device=device)
    net = build_model("resnet50", a.weights).to(device).eval()
    cam4 = GradCAM(model=net, target_layer="layer4", device=device)
    cam3 = GradCAM(model=net, target_layer="layer3", device=device)
    cat, astronaut = load_image(f"{SAMPLES}/chelsea.png"), load_image(f"{SAMPLES}/astronaut.png")
    style = load_image(f"{SAMPLES}/hubble_deep_field.jpg")
    kw = dict(size=a.size, steps=a.steps, seed=0)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def stylize(content):
        return lambda: np.asarray(st.stylize(content, style, **kw))

    def explain(cam):
        return lambda: np.stack([cam.explain(cat, top_k=1)[0].heatmap for _ in range(a.cam_calls)])

    def subject(content):
        return lambda: np.asarray(subject_aware_stylize(content, style, engine=st, cam=cam4, **kw).image)

    workloads = {
        "style transfer": (stylize(cat), stylize(astronaut)),
        f"Grad-CAM ({a.cam_calls} calls per user)": (explain(cam4), explain(cam3)),
        "subject-aware": (subject(cat), subject(astronaut)),
    }

    def sequential(fa, fb):
        return [fa(), fb()]

    def threaded(fa, fb):
        out = [None, None]

        def run(i, fn):
            out[i] = fn()

        threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate((fa, fb))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    print(
        f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
        f"weights {a.weights}, {a.size} px x {a.steps} steps, median of {a.repeat}"
    )
    print()
    print("| workload | sequential s | 2 threads s | threads / sequential | same results |")
    print("| --- | --- | --- | --- | --- |")
    for name, (fa, fb) in workloads.items():
        reference = sequential(fa, fb)  # warm-up, and the results to compare with
        times = {"seq": [], "thr": []}
        same = True
        for _ in range(a.repeat):
            for key, mode in (("seq", sequential), ("thr", threaded)):
                sync()
                t = time.perf_counter()
                out = mode(fa, fb)
                sync()
                times[key].append(time.perf_counter() - t)
                same &= all(np.array_equal(x, y) for x, y in zip(out, reference, strict=True))
        seq, thr = statistics.median(times["seq"]), statistics.median(times["thr"])
        print(f"| {name} | {seq:.2f} | {thr:.2f} | {thr / seq:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
