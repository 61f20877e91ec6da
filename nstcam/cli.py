"""Command-line interface: ``nstcam`` or ``python -m nstcam``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from nstcam._version import __version__
from nstcam.weights import ARCHS, WeightsUnavailableError, download_weights, weights_dir, weights_file

logger = logging.getLogger(__name__)


def _cmd_weights_download(args: argparse.Namespace) -> int:
    try:
        paths = download_weights(args.names or None, timeout=args.timeout, progress=not args.quiet)
    except WeightsUnavailableError as e:
        logger.error("%s", e)
        return 1
    for p in paths:
        print(p)
    return 0


def _cmd_weights_list(_args: argparse.Namespace) -> int:
    d = weights_dir()
    print(f"weights directory: {d}")
    for arch in ARCHS:
        f = weights_file(arch, d)
        state = f"present ({f.stat().st_size / 1e6:.0f} MB)" if f.is_file() else "absent"
        print(f"  {arch:<10} {f.name:<28} {state}")
    return 0


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _warn_random(info) -> None:
    if info.is_random:
        logger.warning("%s", info.notice)


def _cmd_stylize(args: argparse.Namespace) -> int:
    from nstcam.style import StyleTransfer

    try:
        st = StyleTransfer(args.weights, device=args.device)
    except (WeightsUnavailableError, ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 1
    _warn_random(st.weights)
    contents = args.content[0] if len(args.content) == 1 else args.content
    params = dict(
        size=args.size,
        steps=args.steps,
        style_weight=args.style_weight,
        content_weight=args.content_weight,
        tv_weight=args.tv_weight,
        optimizer=args.optimizer,
        init=args.init,
        style_weights=args.style_weights,
        style_scale=args.style_scale,
        preserve_color=args.preserve_color,
        scales=args.scales,
        seed=args.seed,
    )
    try:
        res = st.stylize_batch(
            contents, args.style, args.output, overwrite=args.overwrite, ext=args.ext, **params
        )
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 1
    for p in res.written:
        print(p)
    return 1 if res.failed else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nstcam`` command."""
    p = argparse.ArgumentParser(prog="nstcam", description="Neural style transfer and Grad-CAM.")
    p.add_argument("--version", action="version", version=f"nstcam {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("weights", help="manage pretrained weight files")
    wsub = w.add_subparsers(dest="weights_command", required=True)
    d = wsub.add_parser("download", help="download official ImageNet weights into the weights directory")
    d.add_argument(
        "names", nargs="*", metavar="NAME", help=f"any of {', '.join(ARCHS)} (default: vgg16_bn resnet50)"
    )
    d.add_argument("--timeout", type=float, default=30.0, help="network timeout in seconds (default 30)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_weights_download)
    ls = wsub.add_parser("list", help="show which weight files are present")
    ls.set_defaults(func=_cmd_weights_list)

    s = sub.add_parser("stylize", help="stylise images (files, folders or globs) with one or more styles")
    s.add_argument("content", nargs="+", metavar="CONTENT", help="content images, a folder, or a glob")
    s.add_argument(
        "--style", action="append", required=True, metavar="S", help="style image (repeat to blend)"
    )
    s.add_argument("--style-weights", type=_floats, metavar="W1,W2", help="blend weights of the styles")
    s.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="output folder")
    s.add_argument("--size", type=int, default=512, help="long side of the output in px (default 512)")
    s.add_argument("--steps", type=int, default=300, help="network evaluations per scale (default 300)")
    s.add_argument("--scales", type=_ints, metavar="S1,S2", help="coarse-to-fine long sides, e.g. 256,512")
    s.add_argument("--style-weight", type=float, default=50.0, help="style strength (default 50)")
    s.add_argument("--content-weight", type=float, default=1.0, help="content strength (default 1)")
    s.add_argument("--tv-weight", type=float, default=5.0, help="smoothness (default 5)")
    s.add_argument("--style-scale", type=float, default=1.0, help="style image size relative to output")
    s.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    s.add_argument("--init", choices=["content", "noise", "style"], default="content")
    s.add_argument("--preserve-color", action="store_true", help="keep the content's colours")
    s.add_argument("--seed", type=int, help="random seed (recorded in the JSON sidecar)")
    s.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    s.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    s.add_argument("--ext", default=".png", choices=[".png", ".jpg"], help="output format")
    s.add_argument("--overwrite", action="store_true", help="redo outputs that exist")
    s.set_defaults(func=_cmd_stylize)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
