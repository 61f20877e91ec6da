"""Explaining what a detector or a segmenter found: one result per detection kept (its box, label,
score and map) or per class present (its predicted mask and map), all from one forward pass and
one backward pass per result (:func:`nstcam.cam.targets.one_pass.target_pass`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image

from nstcam._checks import finite, whole
from nstcam.cam._dispatch import Spec, explain_targets, object_maps
from nstcam.cam._maps import upsample_maps
from nstcam.cam.hooks import eval_view
from nstcam.cam.registry import TARGET_METHODS
from nstcam.cam.result import CamResult
from nstcam.cam.targets.objects import BoxTarget, RegionTarget, predicted
from nstcam.cam.targets.perturbation import TargetOptions

__all__ = ["cam_result", "class_indices", "explain_found"]

logger = logging.getLogger(__name__)


def class_indices(classes: Sequence[int | str], categories: Sequence[str]) -> list[int]:
    """Class indices from indices or names (``"person"``), checked against the model's categories.

    Raises:
        ValueError: an unknown name or an index out of range; the message lists the known names.
    """
    out = []
    for c in classes:
        if isinstance(c, str):
            if c not in categories:
                known = ", ".join(n for n in categories if n not in ("__background__", "N/A"))
                raise ValueError(f"classes: unknown class name {c!r}; this model knows {known}")
            out.append(list(categories).index(c))
        else:
            out.append(whole("classes", c, minimum=0, maximum=len(categories) - 1 if categories else None))
    return out


def explain_found(
    cam: Any,
    img: Image.Image,
    *,
    top_k: int | None,
    classes: Sequence[int | str] | None,
    score_threshold: float,
    max_detections: int,
    eigen_smooth: bool,
    aug_smooth: bool = False,
    evaluate: bool = False,
    progress: Any = None,
) -> list[CamResult]:
    """The results of a detector (per detection) or a segmenter (per class present, or asked).

    Raises:
        ValueError: a method without a target pass, ``top_k`` on a detector, a bad threshold, an
            unknown class, or ``evaluate``; before any work.
    """
    if evaluate:
        raise ValueError(
            f"evaluate measures a classifier's class probability; this model is a {cam.kind}: leave it off"
        )
    if cam.method not in TARGET_METHODS:
        raise ValueError(
            f"method {cam.method!r} explains a classifier's classes; a {cam.kind} takes one of "
            f"{', '.join(TARGET_METHODS)}"
        )
    if len(cam.target_layers) != 1:
        raise ValueError(f"a {cam.kind} is explained at one layer; got {len(cam.target_layers)}")
    x = cam.preprocess(img)
    if cam.kind == "detector":
        if top_k is not None:
            raise ValueError(
                "top_k: a detector explains boxes, not its top classes; use score_threshold= and "
                "max_detections= (or classes= to keep some labels)"
            )
        return _detections(
            cam, img, x, classes, score_threshold, max_detections, (eigen_smooth, aug_smooth), progress
        )
    return _regions(cam, img, x, classes, top_k, (eigen_smooth, aug_smooth), progress)


def _detections(cam, img, x, classes, threshold, most, smooth, progress) -> list[CamResult]:
    threshold = finite("score_threshold", threshold, minimum=0, maximum=1)
    most = whole("max_detections", most, minimum=1)
    wanted = set(class_indices(classes, cam.categories)) if classes else None
    kept: list[tuple[list[float], int, float]] = []

    def rows(out: Any) -> list[list[BoxTarget]]:
        d = out[0]
        for box, label, score in zip(
            d["boxes"].tolist(), d["labels"].tolist(), d["scores"].tolist(), strict=True
        ):
            if score >= threshold and (wanted is None or label in wanted) and len(kept) < most:
                kept.append((box, int(label), float(score)))
        return [[BoxTarget(label, box, iou=0.5)] for box, label, _ in kept]

    raws, _ = _explained(cam, x, rows, smooth, progress)
    if not kept:
        lower = " (random weights find nothing: lower score_threshold, --score-threshold in the CLI)"
        why = lower if _random(cam) else ""
        logger.warning("%s found no detection scoring %.2f or more%s", cam.arch, threshold, why)
        return []
    grid = _unpadded(cam.model, x, raws.shape[-2:]) if raws.shape[-2:] != x.shape[-2:] else x.shape[-2:]
    maps = upsample_maps(raws[:, 0, : grid[0], : grid[1]], (img.height, img.width))
    return [
        cam_result(cam, img, maps[j], raws[j, 0], label, score, box=tuple(box))
        for j, (box, label, score) in enumerate(kept)
    ]


def _regions(cam, img, x, classes, top_k, smooth, progress) -> list[CamResult]:
    asked = class_indices(classes, cam.categories) if classes else None
    most = whole("top_k", top_k, minimum=1) if top_k is not None else None
    found: list[tuple[int, float]] = []
    pred: list[torch.Tensor] = []

    def rows(out: torch.Tensor) -> list[list[RegionTarget]]:
        p = predicted(out[0])
        pred.append(p)
        share = torch.bincount(p.flatten(), minlength=out.shape[1]).float() / p.numel()
        order = (
            asked
            if asked is not None
            else [c for c in share.argsort(descending=True).tolist() if share[c] > 0 and c != 0]
        )
        found.extend((c, float(share[c])) for c in order[:most])
        return [[RegionTarget(c, (p == c).to(out.dtype))] for c, _ in found]

    raws, out = _explained(cam, x, rows, smooth, progress)
    if not found:
        why = " (random weights: not meaningful)" if _random(cam) else ""
        logger.warning("%s found no class but the background%s", cam.arch, why)
        return []
    maps = upsample_maps(raws[:, 0], (img.height, img.width))
    results = []
    for j, (c, _share) in enumerate(found):
        region = pred[0] == c
        mask = (
            F.interpolate(region[None, None].float(), size=(img.height, img.width), mode="nearest")[0, 0]
            > 0.5
        )
        score = _mean_probability(out, c, region)
        results.append(cam_result(cam, img, maps[j], raws[j, 0], c, score, mask=mask.cpu().numpy()))
    return results


def _explained(cam: Any, x: torch.Tensor, rows: Any, smooth: tuple[bool, bool], progress: Any):
    """(raw maps (k, 1, h, w), the model's output) of the target rows ``rows`` picks from the output;
    with ``aug_smooth``, each row's maps averaged over the six augmentations, its target following
    the flips (at the input's size)."""
    eigen_smooth, aug_smooth = smooth
    chosen: list[Any] = []

    def pick(out: Any) -> list[Any]:
        chosen.extend(rows(out))
        return [] if aug_smooth else chosen  # augmented: the rows are explained below

    model = eval_view(cam.model)
    raws, _, out = object_maps(
        cam.method,
        model,
        cam.target_layers[0],
        cam.layouts[0],
        x,
        pick,
        eigen_smooth,
        _options(cam, progress),
    )
    if aug_smooth and chosen:
        spec = Spec.of(cam, graphs=False)
        raws = torch.stack(
            [explain_targets(spec, model, x, row, True, eigen_smooth, progress)[0] for row in chosen]
        )
    return raws, out


def _mean_probability(out: torch.Tensor, c: int, region: torch.Tensor) -> float:
    """Class ``c``'s mean probability over ``region`` of image 0: the head's class probabilities,
    upsampled as its logits are, averaged over the region (0 for an empty region). Read on the
    head's grid (``out.low_res``, 1/8 of the pixels for LR-ASPP) where the output carries it."""
    area = float(region.sum())
    if area == 0:
        return 0.0
    low = getattr(out, "low_res", None)
    if low is None:
        return float((out[0].softmax(0)[c] * region).sum() / area)
    p = F.interpolate(
        low[:1].softmax(1)[:, c : c + 1], size=tuple(region.shape), mode="bilinear", align_corners=False
    )[0, 0]
    return float((p * region).sum() / area)


def cam_result(
    cam: Any,
    img: Image.Image,
    heat: torch.Tensor,
    raw: torch.Tensor,
    index: int,
    score: float,
    *,
    label: str | None = None,
    **extra: Any,
) -> CamResult:
    """One :class:`CamResult` of ``cam`` (its method, layer, weights, colours) for class ``index``
    (named ``label``, default the class's name); ``extra``: ``box``, ``mask``, ``faithfulness``..."""
    return CamResult(
        heatmap=heat.float().cpu().numpy(),
        raw=raw.float().cpu().numpy(),
        class_index=int(index),
        label=cam.label(int(index)) if label is None else label,
        score=score,
        image=img,
        method=cam.method,
        layer=cam.target_layer,
        weights=cam.weights,
        colormap=cam.colormap,
        alpha=cam.alpha,
        **extra,
    )


def _unpadded(model: Any, x: torch.Tensor, grid: tuple[int, int]) -> tuple[int, int]:
    """The part of the levels' grid that covers the image: a detector resizes its input and pads it
    to a multiple of its stride; the padding's share of the grid is cut before upsampling."""
    transform = getattr(model, "transform", None)
    if transform is None:
        return tuple(grid)
    with torch.no_grad():
        batch, _ = transform([x[0]])
    (th, tw), (ph, pw) = batch.image_sizes[0], batch.tensors.shape[-2:]
    return max(1, round(grid[0] * th / ph)), max(1, round(grid[1] * tw / pw))


def _options(cam: Any, progress: Any) -> TargetOptions:
    return TargetOptions(cam.scorecam_batch, cam.seed, cam.n_samples, cam.noise_std, progress)


def _random(cam: Any) -> bool:
    return bool(cam.weights is not None and cam.weights.is_random)
