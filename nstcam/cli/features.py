"""``nstcam features``: a grid of the most active channels of one layer."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from nstcam._commands import command
from nstcam._mark import tag_weights
from nstcam.cli._common import error, kept, warn_random
from nstcam.weights import ARCHS, WeightsUnavailableError

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """``nstcam features``."""
    f = command(sub, "features")
    f.add_argument("image", metavar="IMAGE")
    f.add_argument(
        "--layer",
        help="relu3_1 (vgg16_bn) or layer3, layer4.1 (ResNets); default: relu3_1 for vgg16_bn, else the "
        "model's Grad-CAM layer (as the app)",
    )
    f.add_argument("-o", "--output", required=True, metavar="OUT.png")
    f.add_argument("--model", default="vgg16_bn", choices=list(ARCHS), help="default vgg16_bn")
    f.add_argument("--top", type=int, default=16, help="channels in the grid (default 16)")
    f.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    f.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    f.add_argument("--overwrite", action="store_true", help="redo an output that exists (default: keep it)")
    f.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from nstcam.features import feature_maps
    from nstcam.image import ImageError, save_image

    if kept(args.output, args.overwrite):
        return 0
    if args.layer is None:
        from nstcam.cam.layers import arch_spec, skeleton

        args.layer = "relu3_1" if args.model == "vgg16_bn" else arch_spec(skeleton(args.model)).default_layer
    try:
        if args.model == "vgg16_bn":
            from nstcam.style import StyleTransfer

            engine = StyleTransfer(args.weights, device=args.device)
        else:
            from nstcam.weights import build_model

            engine = build_model(args.model, args.weights)
        fm = feature_maps(engine, args.image, args.layer, top=args.top)
    except (WeightsUnavailableError, ValueError, FileNotFoundError, ImageError) as e:
        error(e)
        return 1
    from nstcam.weights import weights_info

    info = weights_info(getattr(engine, "model", engine))
    warn_random(info)
    out = save_image(tag_weights(fm.grid, info.notice, info.is_random), Path(args.output))
    meta = {"image": args.image, **fm.to_dict(), "weights": info.notice, "random_weights": info.is_random}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    print(out)
    return 0
