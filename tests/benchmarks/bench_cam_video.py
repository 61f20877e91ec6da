"""What Grad-CAM over time costs: one window's Grad-CAM against its forward pass (torchvision's video
ResNets, random weights, 16 x 112 x 112 windows, batch 1), against pytorch-grad-cam's 5D Grad-CAM on
the same window; and the peak memory of ``explain_video`` on clips of 2.5, 5 and 10 s at the model's
resolution (171 x 128, 25 fps, overlay clip, sheet and CSV written), each in a fresh process
(its own high-water mark, VmHWM).

    python tests/benchmarks/bench_cam_video.py [--threads N] [--quick]

Targets (issue 41): a window's Grad-CAM <= 1.3x its forward pass; peak RSS independent of the clip's
length within 10 %.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

STREAM = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
from nstcam.cam import GradCAM
def peak():  # VmHWM: this process's own high-water mark (ru_maxrss carries the parent's over exec)
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    return int(status.split()[0]) / 1024
cam = GradCAM("r3d_18", weights="random", device="cpu")
base, t0 = peak(), time.perf_counter()
r = cam.explain_video(sys.argv[1], top_k=3, output=sys.argv[2] + "/out.mp4",
                      contact_sheet=sys.argv[2] + "/sheet.png", csv_path=sys.argv[2] + "/scores.csv")
print(r.frames, len(r.windows), base, peak(), time.perf_counter() - t0)
"""


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def window_costs(repeats: int) -> None:
    from nstcam.cam import GradCAM

    print("| model | forward (s) | Grad-CAM, 1 class (s) | ratio | Grad-CAM, 3 classes (s) | ratio | "
          "pytorch-grad-cam (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    x = torch.randn(1, 3, 16, 112, 112, generator=torch.Generator().manual_seed(0))
    for arch in ("r3d_18", "mc3_18", "r2plus1d_18"):
        cam = GradCAM(arch, weights="random", device="cpu")
        fwd = median_time(lambda cam=cam: cam.predict(x), repeats)
        one = median_time(lambda cam=cam: cam.class_maps(x, [0]), repeats)
        three = median_time(lambda cam=cam: cam.class_maps(x, [0, 1, 2]), repeats)
        theirs = float("nan")
        try:
            from pytorch_grad_cam import GradCAM as PGC
            from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

            ref = PGC(model=cam.model, target_layers=[cam.model.layer4])
            theirs = median_time(
                lambda ref=ref: ref(input_tensor=x, targets=[ClassifierOutputTarget(0)]), repeats
            )
            ref.activations_and_grads.release()
        except ImportError:
            pass
        print(
            f"| {arch} | {fwd:.3f} | {one:.3f} | {one / fwd:.2f}x | {three:.3f} | {three / fwd:.2f}x | {theirs:.3f} |"
        )


def parity() -> None:
    """Grad-CAM on R3D-18 and R(2+1)D-18 against pytorch-grad-cam 1.5.7's 5D Grad-CAM (the test's
    clips: seed 1, two clips, each clip's top class): Pearson r at the layer's grid, after their
    resizing (a cubic spline zoom), and nstcam's own trilinear maps against their output."""
    from pytorch_grad_cam import GradCAM as PGC
    from pytorch_grad_cam.utils.image import scale_cam_image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    from nstcam.cam import GradCAM

    def r(a, b) -> float:
        return float(np.corrcoef(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())[0, 1])

    print(
        "\n| model | clip | r at the layer's grid | r, resized their way | r, nstcam's trilinear vs theirs |"
    )
    print("|---|---|---|---|---|")
    x = torch.randn(2, 3, 16, 112, 112, generator=torch.Generator().manual_seed(1))
    for arch in ("r3d_18", "r2plus1d_18"):
        cam = GradCAM(arch, weights="random", device="cpu")
        classes = cam.predict(x).argmax(1).tolist()
        raw = cam.compute(x, targets=classes, raw=True)
        ours = cam.compute(x, targets=classes)
        with PGC(model=cam.model, target_layers=[cam.model.layer4]) as ref:
            theirs = ref(input_tensor=x, targets=[ClassifierOutputTarget(c) for c in classes])
            acts = ref.activations_and_grads
            a, g = acts.activations[0].numpy(), acts.gradients[0].numpy()
            their_raw = np.maximum(ref.get_cam_image(x, None, None, a, g, False), 0)
        their_way = scale_cam_image(raw.numpy(), (112, 112, 16))
        for i in range(2):
            print(f"| {arch} | {i} | {r(raw[i], their_raw[i]):.7f} | {r(their_way[i], theirs[i]):.7f} | "
                  f"{r(ours[i], theirs[i]):.4f} |")  # fmt: skip


def write_clip(path: Path, seconds: float, fps: int = 25, w: int = 172, h: int = 128) -> Path:
    """A clip of moving noise blocks with an AAC tone (the model's resolution: 171 x 128, even)."""
    rng = np.random.default_rng(0)
    n = round(seconds * fps)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=Fraction(fps))
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        base = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        for t in range(n):
            f = np.roll(base, 2 * t, axis=1)
            for p in vs.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return path


def streaming_memory(threads: int, lengths: tuple[float, ...]) -> None:
    print("\n| clip | frames | windows | RSS after the model (MB) | peak RSS (MB) | growth (MB) | time (s) |")
    print("|---|---|---|---|---|---|---|")
    peaks = []
    with tempfile.TemporaryDirectory() as tmp:
        for seconds in lengths:
            clip = write_clip(Path(tmp) / f"clip_{seconds:g}s.mp4", seconds)
            out = subprocess.run(
                [sys.executable, "-c", STREAM, str(clip), tmp, str(threads)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            frames, windows, base, peak, secs = out.stdout.split()
            peaks.append(float(peak))
            growth = float(peak) - float(base)
            print(f"| {seconds:g} s | {frames} | {windows} | {float(base):.0f} | {float(peak):.0f} | {growth:.0f} | "
                  f"{float(secs):.1f} |")  # fmt: skip
    print(f"\npeak RSS, longest clip against shortest: {peaks[-1] / peaks[0]:.3f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="clips of 1 and 2 s, 3 repeats")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, CPU")
    window_costs(3 if args.quick else args.repeats)
    parity()
    streaming_memory(args.threads, (1.0, 2.0) if args.quick else (2.5, 5.0, 10.0))


if __name__ == "__main__":
    main()
