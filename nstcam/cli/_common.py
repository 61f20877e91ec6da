"""What every command shares: its errors in the CLI's words, the keep-what-exists rule, lists of
numbers, progress where no terminal shows a bar, Ray Data runs and their arguments."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from nstcam.weights import WeightsUnavailableError

__all__ = [
    "add_ray_arguments",
    "error",
    "floats",
    "frame_logger",
    "gradcam",
    "ints",
    "kept",
    "loss_weights",
    "one_or_many",
    "ray_address",
    "report_kept",
    "run_dataset",
    "warn_random",
]

logger = logging.getLogger(__name__)


def loss_weights(p: argparse.ArgumentParser) -> None:
    """``--style-weight``, ``--content-weight`` and ``--tv-weight``, defaulting as the engine does."""
    from nstcam.style import stylize_defaults

    d = stylize_defaults()
    for flag, key, what in (
        ("--style-weight", "style_weight", "style loss weight, for experts: overrides --strength"),
        ("--content-weight", "content_weight", "content strength"),
        ("--tv-weight", "tv_weight", "smoothness"),
    ):
        said = "from --strength" if d[key] is None else f"{d[key]:g}"
        p.add_argument(flag, type=float, default=d[key], help=f"{what} (default {said})")


def error(e: BaseException) -> None:
    """Logs why a command failed, in the CLI's words (``--weights random``, not Python syntax)."""
    if isinstance(e, WeightsUnavailableError) and e.path is not None:
        logger.error("%s", e.explain("To try nstcam without them, add --weights random (not meaningful)."))
    else:
        logger.error("%s", e)


def frame_logger() -> Callable[[Any], None] | None:
    """Where no person watches (a log file, a pipe: no progress bar), each frame done as a log line,
    so a long run says where it is; None in a terminal (the bar says it)."""
    from nstcam._terminal import watching

    if watching():
        return None

    def logged(info: Any) -> None:
        if info.done:
            logger.info("frame %d/%d done · %.1f s", info.frame, info.frames, info.elapsed)

    return logged


def floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def kept(output: Any, overwrite: bool) -> bool:
    """The rule of every command: an output that exists is kept (logged, printed) unless ``--overwrite``."""
    from pathlib import Path

    if overwrite or not Path(output).exists():
        return False
    logger.info("kept %s: it exists; add --overwrite to redo it", output)
    print(output)
    return True


def warn_random(info) -> None:
    if info.is_random:
        logger.warning("%s", info.notice)


def ray_address(args: argparse.Namespace) -> str | None:
    return None if args.ray == "local" else args.ray


def run_dataset(call: Callable[[], Any], shown: Callable[[Any], list]) -> int:
    """Runs a Ray Data job, prints what ``shown`` picks from its result, logs each failed input."""
    try:
        res = call()
    except (ImportError, ValueError, FileNotFoundError, TypeError, RuntimeError) as e:
        error(e)  # RuntimeError: missing weights (named with the CLI's fix), or the Ray job failed
        return 1
    for p in shown(res):
        print(p)
    for src, why in res.failed.items():
        logger.error("skipped %s: %s", src, why)
    report_kept(res)
    return 1 if res.failed else 0


def report_kept(res: Any) -> None:
    """Says, in the CLI's words, that outputs already there were kept."""
    if getattr(res, "skipped", None):
        logger.info("kept %d existing output(s); add --overwrite to redo them", len(res.skipped))


def gradcam(arch: str, args: argparse.Namespace) -> Any:
    from nstcam.cam import GradCAM

    return GradCAM(arch, weights=args.weights, device=args.device)


def add_ray_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("many images on Ray Data (pip install 'nstcam[ray]')")
    g.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run on Ray: alone, a local instance sized to this machine; or auto, or ray://host:10001",
    )
    g.add_argument("--workers", type=int, help="Ray workers (default: one per GPU, else one per two CPUs)")
    g.add_argument("--gpus-per-worker", type=float, default=0, help="GPUs each worker reserves (default 0)")


def one_or_many(paths: list[str]) -> str | list[str]:
    """A command's positional inputs as the engines take them: one path (a file, a folder or a glob)
    as it is, several as a list."""
    return paths[0] if len(paths) == 1 else paths


def add_vgg_arguments(p: argparse.ArgumentParser) -> None:
    """``--arch`` and ``--preprocess``: which VGG the style engine runs, and how it takes an image
    (caffe's BGR and mean for a VGG trained in caffe or Keras, such as a features-only VGG16 file)."""
    from nstcam.style import STYLE_ARCHS

    p.add_argument("--arch", default="vgg16_bn", choices=STYLE_ARCHS, help="the VGG (default vgg16_bn)")
    p.add_argument(
        "--preprocess",
        default="torchvision",
        choices=("torchvision", "caffe"),
        help="how the VGG takes an image: torchvision's (RGB, ImageNet mean and std) or caffe's (BGR, "
        "mean subtracted, 0-255)",
    )


def style_engine(args: argparse.Namespace, device: str | None = None) -> Any:
    """The style engine ``--weights``, ``--arch`` and ``--preprocess`` ask for, on ``--device``."""
    from nstcam.preprocess import Preprocess
    from nstcam.style import StyleTransfer

    caffe = Preprocess.caffe() if getattr(args, "preprocess", "torchvision") == "caffe" else None
    arch = getattr(args, "arch", "vgg16_bn")
    return StyleTransfer(args.weights, device=device or args.device, arch=arch, transform=caffe)
