"""``nstcam learn-style PAINTING --out mine.safetensors``: a painting learned as a new instant style
(:meth:`nstcam.FastStyle.learn`), then ``nstcam stylize --fast --style mine.safetensors``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from nstcam._commands import command
from nstcam.cli._common import add_vgg_arguments, error, kept, style_engine, warn_random
from nstcam.fast import MARGIN_PENALTY

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """``nstcam learn-style``'s arguments."""
    p = command(sub, "learn-style")
    p.add_argument("painting", help="the style image to learn")
    p.add_argument("--out", required=True, metavar="FILE.safetensors", help="where the style file goes")
    p.add_argument("--photos", metavar="DIR|GLOB", help="photos to crop from (default: the bundled samples)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, default=200, help="Adam steps (default 200)")
    budget.add_argument("--minutes", type=float, help="stop after this many minutes (at most 2000 steps)")
    p.add_argument("--size", type=int, default=256, help="crop side in px (default 256)")
    p.add_argument("--batch", type=int, default=2, help="crops per step (default 2)")
    p.add_argument("--lr", type=float, default=0.05, help="Adam's learning rate (default 0.05)")
    p.add_argument("--seed", type=int, default=0, help="the crops drawn (default 0)")
    p.add_argument(
        "--train",
        choices=("norm", "vector"),
        default="norm",
        help="norm: the 694 normalisation scales and shifts (default); vector: the 100-value style vector",
    )
    p.add_argument(
        "--content-weight",
        type=float,
        help="the loss' content weight (default 1): 2 keeps more of each photo's subject and moves less "
        "toward the painting (docs/style.md measures both)",
    )
    p.add_argument(
        "--content-margin",
        type=_margin,
        metavar="M|none",
        help="how much more content loss than in the one pass a photo may have (default 0.15, learn's own: "
        "a subject the one pass keeps stays longer); none: the loss alone, which moves further sooner",
    )
    p.add_argument(
        "--margin-penalty",
        type=float,
        help=f"what content loss beyond the margin costs (default {MARGIN_PENALTY:g}): more keeps the "
        "subject surer and moves less (docs/style.md)",
    )
    p.add_argument("--weights", default="imagenet", help="the teaching VGG's: imagenet, random, or a file")
    add_vgg_arguments(p)  # the teaching VGG: --arch, --preprocess
    p.add_argument("--device", help="cpu, cuda... (default cpu)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=run)


_NO_MARGIN = "none"


def _margin(value: str) -> float | str:
    """``--content-margin``'s value: a number, or ``none`` for no margin."""
    if value.strip().lower() == _NO_MARGIN:
        return _NO_MARGIN
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or none, got {value[:20]!r}") from None


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line; learn's own defaults for the rest."""
    out: dict[str, Any] = {}
    if args.content_margin is not None:
        out["content_margin"] = None if args.content_margin == _NO_MARGIN else args.content_margin
    if args.margin_penalty is not None:
        out["margin_penalty"] = args.margin_penalty
    if args.content_weight is not None:
        out["content_weight"] = args.content_weight
    return out


def run(args: argparse.Namespace) -> int:
    """Learns the style and writes it; the loss is logged every 10 steps and at the end."""
    from pathlib import Path

    from nstcam.fast import FastStyle, FastWeightsError
    from nstcam.image import ImageError
    from nstcam.weights import WeightsUnavailableError

    if not str(args.out).lower().endswith(".safetensors"):
        logger.error("--out must end in .safetensors, got %s", Path(args.out).name[:80])
        return 2
    if kept(args.out, args.overwrite):
        return 0

    def logged(info: Any) -> None:
        if info.step % 10 == 0 or info.step == info.steps:
            logger.info("step %d/%d loss %.4g · %.0f s", info.step, info.steps, info.loss, info.seconds)

    try:
        engine = style_engine(args, device=args.device or "cpu")
        warn_random(engine.weights)
        fast = FastStyle(device=args.device or "cpu")
        style = fast.learn(
            args.painting,
            args.photos,
            engine=engine,
            size=args.size,
            steps=2000 if args.minutes is not None else args.steps,
            minutes=args.minutes,
            batch=args.batch,
            lr=args.lr,
            seed=args.seed,
            callback=logged,
            train=args.train,
            **_given(args),
        )
    except (
        FastWeightsError,
        WeightsUnavailableError,
        ImageError,
        ValueError,
        FileNotFoundError,
        OSError,
    ) as e:
        error(e)
        return 1
    style.save(args.out)
    logger.info(
        "learned %s in %d steps: loss %.4g -> %.4g",
        style.meta["painting"],
        len(style.losses),
        style.losses[0],
        style.losses[-1],
    )
    print(args.out)
    return 0
