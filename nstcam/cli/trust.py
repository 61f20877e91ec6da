"""The CLI's trust report: ``nstcam cam IMAGES --trust -o OUTDIR`` (issue 53)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

__all__ = ["add_trust_arguments", "cmd_cam_trust"]

logger = logging.getLogger(__name__)


def add_trust_arguments(c: argparse.ArgumentParser) -> None:
    """``--trust`` and ``--trust-methods`` of ``nstcam cam``."""
    from nstcam.cam.trust import DEFAULT_METHODS

    c.add_argument(
        "--trust",
        action="store_true",
        help="instead of overlays: can these maps be trusted? every method of --trust-methods on the "
        "images (a clip: 4 windows spread over it), each metric with a bootstrap 95%% interval, ranks "
        "and cost (OUTDIR/trust.csv, trust.md)",
    )
    c.add_argument(
        "--trust-methods",
        type=lambda t: [m.strip() for m in t.split(",") if m.strip()],
        default=list(DEFAULT_METHODS),
        metavar="M1,M2",
        help=f"methods of --trust (default {','.join(DEFAULT_METHODS)})",
    )


def cmd_cam_trust(cam: Any, args: argparse.Namespace) -> int:
    """Runs :meth:`nstcam.GradCAM.trust` on the images (a clip: 4 windows spread over it), writes the
    CSV and the markdown, prints it. A file that cannot be read is said and left out."""
    out = Path(args.output)
    files = [out / "trust.csv", out / "trust.md"]
    if all(f.exists() for f in files) and not args.overwrite:
        logger.info("kept %s: it exists; add --overwrite to redo it", files[0])
        return 0
    inputs = _inputs(cam, args.images)
    if not inputs:
        logger.error("no image or clip could be read: nothing to report")
        return 1
    try:
        report = cam.trust(inputs, methods=args.trust_methods)
    except ValueError as e:  # the files were read above: what is left is a bad argument
        logger.error("%s", e)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    report.csv(files[0])
    files[1].write_text(report.markdown() + "\n")
    print(report.markdown())
    for method, why in report.failed.items():
        logger.warning("%s: %s", method, why)
    return 0


CLIP_WINDOWS = 4


def _inputs(cam: Any, sources: list[str]) -> list[Any]:
    """Each photo loaded, each clip as :data:`CLIP_WINDOWS` windows (tensors), up to the report's
    :data:`nstcam.cam.trust.MAX_IMAGES` inputs (the sources past them are not read); a clip model
    takes clips only. What cannot be read is logged by its name and left out."""
    from nstcam._files import VIDEO_EXTENSIONS
    from nstcam.cam.clips import clip_windows
    from nstcam.cam.trust import MAX_IMAGES
    from nstcam.image import ImageError, load_image
    from nstcam.video import VideoError

    out: list[Any] = []
    for i, src in enumerate(sources):
        if len(out) >= MAX_IMAGES:
            logger.warning("the report takes %d inputs: %d sources left unread", MAX_IMAGES, len(sources) - i)
            break
        if Path(src).suffix.lower() not in VIDEO_EXTENSIONS:
            if cam.frames is not None:
                logger.error("%s: a clip model's trust report takes clips, not images", Path(src).name)
                continue
            try:
                out.append(load_image(src))
            except (ImageError, FileNotFoundError) as e:
                logger.error("%s", e)
            continue
        try:
            out += clip_windows(cam, src, CLIP_WINDOWS)
        except (VideoError, ValueError, OSError) as e:
            logger.error("%s", e)
    return out[:MAX_IMAGES]
