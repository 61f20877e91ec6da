"""``nstcam video``: a clip stylised without flicker (or, with ``--fast``, by a pretrained network
steadied along the flow; with ``--ray``, a folder of clips on Ray Data)."""

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
    frame_logger,
    ints,
    kept,
    loss_weights,
    ray_address,
    run_dataset,
    style_engine,
    warn_random,
)
from nstcam.cli.fast import add_fast_arguments, cmd_video_fast
from nstcam.video.stylize import DEFAULT_TEMPORAL_WEIGHT
from nstcam.weights import WeightsUnavailableError

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    v = command(sub, "video")
    v.add_argument(
        "video",
        metavar="VIDEO",
        help="a video file (mp4, webm, mov, mkv, gif...), a folder or glob of frames; with --ray: "
        "a folder or glob of videos",
    )
    v.add_argument("--style", action="append", metavar="S", help="style image (repeat to blend)")
    v.add_argument("--style-weights", type=floats, metavar="W1,W2", help="blend weights of the styles")
    v.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="out.mp4 / .webm / .mov / .mkv / .gif, or a folder for PNG frames (with --ray: a folder)",
    )
    v.add_argument("--size", type=int, default=512, help="long side of the frames in px (default 512)")
    v.add_argument("--steps", type=int, default=100, help="network evaluations per frame (default 100)")
    v.add_argument(
        "--temporal-weight",
        type=float,
        default=DEFAULT_TEMPORAL_WEIGHT,
        help=f"weight of the temporal loss (default {DEFAULT_TEMPORAL_WEIGHT:g}; 0: every frame on its own)",
    )
    v.add_argument(
        "--flow",
        default="dis",
        choices=["dis", "raft", "raft_small", "raft_large"],
        help="optical flow: OpenCV's DIS (default) or torchvision's RAFT (official weights)",
    )
    v.add_argument("--passes", type=int, default=1, help="1: one pass; N: Ruder's multi-pass (default 1)")
    v.add_argument(
        "--batch-frames",
        type=int,
        default=1,
        help="with --passes 2+ and --optimizer adam: frames per network step (the GPU's lever; default 1)",
    )
    v.add_argument(
        "--long-term",
        type=ints,
        default=[1],
        metavar="J1,J2",
        help="hold each frame to these earlier frames too, e.g. 1,10,20,40 (Ruder's long-term consistency)",
    )
    v.add_argument("--max-frames", type=int, help="stylise only the first N frames")
    v.add_argument("--fps", type=float, help="frame rate of a folder of frames (default 25)")
    loss_weights(v)
    v.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    v.add_argument(
        "--preserve-color",
        nargs="?",
        const="luminance",
        default=False,
        choices=["luminance", "histogram"],
        help="keep the clip's colours",
    )
    v.add_argument("--seed", type=int, default=0, help="seed of every frame's optimisation (default 0)")
    v.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    add_vgg_arguments(v)
    v.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    v.add_argument("--overwrite", action="store_true", help="redo outputs that exist (default: keep them)")
    v.add_argument("--video-ext", default=".mp4", help="with --ray: format of the outputs (default .mp4)")
    add_ray_arguments(v)
    add_fast_arguments(v, video=True)
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.fast:
        return cmd_video_fast(args)
    if not args.style:
        logger.error("give --style IMAGE (repeat to blend); --style-index needs --fast")
        return 2
    if args.ray:
        from nstcam.distributed import stylize_dataset

        ray = dict(num_workers=args.workers, gpus_per_worker=args.gpus_per_worker, address=ray_address(args))
        return run_dataset(
            lambda: stylize_dataset(
                args.video,
                args.style,
                args.output,
                **ray,
                weights=args.weights,
                overwrite=args.overwrite,
                video_ext=args.video_ext,
                **_video_params(args),
            ),
            lambda res: res.written,
        )
    from nstcam.video import VideoError

    if args.fps is not None and args.fps <= 0:
        logger.error("--fps must be > 0, got %g", args.fps)
        return 2
    if kept(args.output, args.overwrite):
        return 0
    try:
        st = style_engine(args)
        warn_random(st.weights)
        res = st.stylize_video(
            args.video, args.style, args.output, fps=args.fps, progress=frame_logger(), **_video_params(args)
        )
    except (WeightsUnavailableError, VideoError, ValueError, FileNotFoundError) as e:
        error(e)
        return 1
    print(res.path)
    err = res.warping_error_text + (" (lower is steadier)" if res.warping_error is not None else "")
    logger.info(
        "%d frames at %g fps, %dx%d; %.2f s per frame; warping error %s%s",
        res.frames,
        res.fps,
        *res.size,
        res.seconds / max(1, res.frames),
        err,
        "; RANDOM weights: not meaningful" if res.random_weights else "",
    )
    return 0


def _video_params(args: argparse.Namespace) -> dict:
    return dict(
        size=args.size,
        steps=args.steps,
        temporal_weight=args.temporal_weight,
        flow=args.flow,
        passes=args.passes,
        batch_frames=args.batch_frames,
        long_term=args.long_term,
        max_frames=args.max_frames,
        style_weight=args.style_weight,
        strength=args.strength,
        content_weight=args.content_weight,
        tv_weight=args.tv_weight,
        optimizer=args.optimizer,
        style_weights=args.style_weights,
        preserve_color=args.preserve_color,
        seed=args.seed,
    )
