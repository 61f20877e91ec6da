"""Command-line interface: ``nstcam`` or ``python -m nstcam``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from nstcam import __version__
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
