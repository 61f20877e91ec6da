"""``nstcam cam``: saliency overlays and top classes of images and clips (``--evaluate``: their
faithfulness; ``--trust``: the trust report; ``--ray``: Ray Data)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from nstcam._commands import command
from nstcam.cam.registry import METHODS, REGISTRY
from nstcam.cli._common import add_ray_arguments, error, one_or_many, ray_address, run_dataset
from nstcam.cli.trust import add_trust_arguments, cmd_cam_trust
from nstcam.metrics.registry import FAITHFULNESS_FIGURES
from nstcam.weights import ARCHS, DETECTORS, SEGMENTERS, VIDEO_ARCHS, WeightsUnavailableError

__all__ = ["add_parser", "run"]

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """``nstcam cam``."""
    c = command(sub, "cam")
    c.add_argument("images", nargs="+", metavar="IMAGE", help="images, or clips (explained over time)")
    c.add_argument("-o", "--output", required=True, metavar="OUTDIR")
    c.add_argument(
        "--overwrite", action="store_true", help="redo images explained there (default: keep them)"
    )
    _add_method_arguments(c)
    _add_target_arguments(c)
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
    add_ray_arguments(c)
    c.set_defaults(func=run)


def _add_method_arguments(c: argparse.ArgumentParser) -> None:
    """The model, its layer and the CAM method: ``--arch`` to ``--seed``."""
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


def _add_target_arguments(c: argparse.ArgumentParser) -> None:
    """What is explained: ``--top-k``, a detector's or segmenter's ``--classes``, a clip's windows."""
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


def run(args: argparse.Namespace) -> int:
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
        error(e)
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
    images = one_or_many(args.images)
    return run_dataset(
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
            address=ray_address(args),
            weights=args.weights,
            input_size=args.input_size,
            overwrite=args.overwrite,
            mean=_stats(args.mean),
            std=_stats(args.std),
        ),
        lambda res: [res.csv],
    )


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
                cam,
                str(src),
                out / name,
                top_k=args.top_k or 1,
                target=args.target,
                stride=args.stride,
                smooth=args.smooth,
                evaluate=args.evaluate,
                evaluate_steps=min(args.evaluate_steps, 100),
            )
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


_METRICS = tuple(m.key for m in FAITHFULNESS_FIGURES)


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
    arrows = {m.key: "+" if m.higher_is_better else "-" for m in FAITHFULNESS_FIGURES}
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
