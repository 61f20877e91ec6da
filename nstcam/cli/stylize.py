"""``nstcam stylize``: images, folders or globs through :class:`nstcam.StyleTransfer` (or, with
``--fast``, :class:`nstcam.FastStyle`; with ``--ray``, Ray Data)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from nstcam._commands import command
from nstcam.cli._common import (
    add_ray_arguments,
    add_vgg_arguments,
    error,
    floats,
    gradcam,
    ints,
    loss_weights,
    one_or_many,
    ray_address,
    report_kept,
    run_dataset,
    style_engine,
    warn_random,
)
from nstcam.cli.fast import add_fast_arguments, cmd_stylize_fast
from nstcam.style import STYLE_LOSSES, StyleOptions, stylize_defaults
from nstcam.style.losses import REGISTRY as STYLE_LOSS_REGISTRY
from nstcam.style.options import DEFAULT_STEPS_FINEST, INITS, OPTIMIZERS
from nstcam.weights import ARCHS, SEGMENTERS, WeightsUnavailableError

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """``nstcam stylize``."""
    s = command(sub, "stylize")
    s.add_argument("content", nargs="+", metavar="CONTENT", help="content images, a folder, or a glob")
    s.add_argument("--style", action="append", metavar="S", help="style image (repeat to blend)")
    s.add_argument("--style-weights", type=floats, metavar="W1,W2", help="blend weights of the styles")
    s.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="output folder")
    d = stylize_defaults()  # StyleOptions': the one place a stylisation's defaults live
    s.add_argument(
        "--size", type=int, default=d["size"], help=f"long side of the output in px (default {d['size']})"
    )
    s.add_argument(
        "--steps",
        type=int,
        default=d["steps"],
        help=f"network evaluations per scale (default: {DEFAULT_STEPS_FINEST} at the finest scale, 2x at "
        "each coarser one, 100 for a single scale; ended sooner by the convergence stop)",
    )
    s.add_argument("--scales", type=ints, metavar="S1,S2", help="coarse-to-fine long sides, e.g. 256,512")
    loss_weights(s)
    s.add_argument(
        "--style-scale", type=float, default=d["style_scale"], help="style image size relative to output"
    )
    s.add_argument("--optimizer", choices=list(OPTIMIZERS), default=d["optimizer"])
    s.add_argument(
        "--init",
        choices=list(INITS),
        default=d["init"],
        help="start image; style_stats: noise with the style's colour mean and covariance; fast: a "
        "pretrained network's painting (then refined)",
    )
    s.add_argument(
        "--style-loss",
        choices=list(STYLE_LOSSES),
        default=d["style_loss"],
        help="; ".join(f"{name}: {loss.summary}" for name, loss in STYLE_LOSS_REGISTRY.items()),
    )
    s.add_argument(
        "--average",
        type=float,
        metavar="DECAY",
        help="output the moving average of the iterates with this decay, e.g. 0.99 (default: off)",
    )
    s.add_argument(
        "--preserve-color",
        nargs="?",
        const="luminance",
        default=False,
        choices=["luminance", "histogram"],
        help="keep the content's colours: luminance (the default when given alone) or histogram",
    )
    s.add_argument("--seed", type=int, help="random seed (recorded in the JSON sidecar)")
    s.add_argument(
        "--tile",
        type=int,
        help="optimise scales above this many px window by window (memory follows the tile); with "
        "--fast: paint in tiles of this many px with the whole picture's statistics (default: "
        "480-704 px tiles where the untiled pass would need over 1 GiB)",
    )
    s.add_argument("--tile-overlap", type=int, help="px neighbouring windows share (default min(64, tile/4))")
    s.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    add_vgg_arguments(s)
    s.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    s.add_argument("--ext", default=".png", choices=[".png", ".jpg"], help="output format")
    s.add_argument("--overwrite", action="store_true", help="redo outputs that exist (default: keep them)")
    _add_region_arguments(s)
    add_ray_arguments(s)
    add_fast_arguments(s)
    s.set_defaults(func=run)


def _add_region_arguments(s: argparse.ArgumentParser) -> None:
    """Where the style goes: ``--mask`` (a region per style), ``--subject-aware`` (Grad-CAM's or a
    segmenter's subject) and the recognition ``--report``."""
    d = stylize_defaults()
    s.add_argument(
        "--mask",
        action="append",
        help="style mask image (white = styled, black = content kept), any size; one --mask after each "
        "--style gives each style its own region ('rest': the style of what the other masks leave)",
    )
    s.add_argument(
        "--mask-mode",
        choices=["optimize", "blend"],
        default=d["mask_mode"],
        help="masked losses inside the optimisation (default) or a blend afterwards",
    )
    s.add_argument(
        "--subject-aware",
        choices=["background", "subject"],
        help="mask from Grad-CAM: stylise the background or only the subject",
    )
    s.add_argument(
        "--segment",
        type=lambda t: [int(v) if v.strip().isdigit() else v.strip() for v in t.split(",")],
        metavar="CLASSES",
        help="with --subject-aware: the subject is a segmenter's pixels of these classes (person,dog) "
        "instead of Grad-CAM's saliency",
    )
    s.add_argument(
        "--masker",
        default="deeplabv3_mobilenet_v3_large",
        choices=list(SEGMENTERS),
        metavar="ARCH",
        help="segmenter for --segment (default deeplabv3_mobilenet_v3_large)",
    )
    s.add_argument("--threshold", type=float, default=0.4, help="saliency threshold of the subject (0-1)")
    s.add_argument("--feather", type=float, default=8.0, help="mask edge softness in px")
    s.add_argument(
        "--cam-arch",
        default="resnet50",
        choices=list(ARCHS),
        metavar="ARCH",
        help="classifier for --subject-aware and --report (default resnet50)",
    )
    s.add_argument(
        "--report",
        action="store_true",
        help="write <output>_report.json: is the subject still recognised after stylisation?",
    )


def run(args: argparse.Namespace) -> int:

    if args.fast:
        return cmd_stylize_fast(args)
    if not args.style:
        logger.error("give --style IMAGE (repeat to blend); --style-index needs --fast")
        return 2
    if args.segment and not args.subject_aware:  # before any model is built
        logger.error("--segment names the subject of --subject-aware background|subject; add it")
        return 2
    try:
        options = _options(args)  # before any model is built
    except ValueError as e:
        logger.error("%s", e)
        return 1
    if args.ray:
        return _cmd_stylize_ray(args, options)
    try:
        st = style_engine(args)
    except (WeightsUnavailableError, ValueError, FileNotFoundError) as e:
        error(e)
        return 1
    warn_random(st.weights)
    contents = one_or_many(args.content)
    masks, style_mask, regions = args.mask or [], None, {}
    if len(masks) == 1:
        style_mask = masks[0]
    elif masks and len(masks) != len(args.style):
        logger.error(
            "give one --mask, or one --mask per --style (%d styles, %d masks)", len(args.style), len(masks)
        )
        return 2
    elif masks:
        regions["style_masks"] = [None if m.lower() in ("rest", "none", "-") else m for m in masks]
    segmenting = bool(args.subject_aware and args.segment)
    try:  # the classifier only where asked (Grad-CAM's subject, the report); the segmenter for --segment
        cam = gradcam(args.cam_arch, args) if args.report or (args.subject_aware and not segmenting) else None
        seg = gradcam(args.masker, args) if segmenting else None
    except (WeightsUnavailableError, ValueError) as e:
        error(e)
        return 1
    if segmenting:
        from nstcam.subject import segment_mask

        def style_mask(img):
            return segment_mask(img, seg, args.segment, mode=args.subject_aware, feather=args.feather)[0]

    elif args.subject_aware:
        from nstcam.subject import subject_mask

        def style_mask(img):
            return subject_mask(
                img, cam, mode=args.subject_aware, threshold=args.threshold, feather=args.feather
            )[0]

    try:
        res = st.stylize_batch(
            contents,
            args.style,
            args.output,
            options=options,
            overwrite=args.overwrite,
            ext=args.ext,
            style_mask=style_mask,
            **regions,
        )
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 1
    report_kept(res)
    for p in res.written:
        print(p)
        if args.report:
            import json

            from nstcam.subject import recognition_report

            meta = json.loads(p.with_suffix(".json").read_text())
            rep = recognition_report(meta["input"], p, cam)
            p.with_name(p.stem + "_report.json").write_text(json.dumps(rep.to_dict(), indent=2))
            logger.info("%s: %s", p.name, rep.summary())
    return 1 if res.failed else 0


def _options(args: argparse.Namespace) -> StyleOptions:
    """The command's options as the engine takes them."""
    return StyleOptions.of(
        size=args.size,
        steps=args.steps,
        style_weight=args.style_weight,
        strength=args.strength,
        content_weight=args.content_weight,
        tv_weight=args.tv_weight,
        optimizer=args.optimizer,
        init=args.init,
        style_weights=args.style_weights,
        style_scale=args.style_scale,
        preserve_color=args.preserve_color,
        scales=args.scales,
        seed=args.seed,
        tile=args.tile,
        tile_overlap=args.tile_overlap,
        style_loss=args.style_loss,
        average=False if args.average is None else args.average,
        mask_mode=args.mask_mode,
    )


def _cmd_stylize_ray(args: argparse.Namespace, options: StyleOptions) -> int:
    from nstcam.distributed import stylize_dataset

    defaults = stylize_defaults()
    if args.mask or args.subject_aware or args.report:
        logger.error("--ray does not take --mask, --subject-aware or --report yet; run without --ray")
        return 2
    contents = one_or_many(args.content)
    return run_dataset(
        lambda: stylize_dataset(
            contents,
            args.style,
            args.output,
            num_workers=args.workers,
            gpus_per_worker=args.gpus_per_worker,
            address=ray_address(args),
            weights=args.weights,
            overwrite=args.overwrite,
            ext=args.ext,
            **{k: v for k, v in options.as_dict().items() if v != defaults[k]},  # what was asked
        ),
        lambda res: res.written,
    )
