"""The Grad-CAM tab on detectors and segmenters: what the model found, each result explained.

A detector gives one overlay per detection kept (its box drawn), a segmenter one per class present
or picked (its mask outlined); the tab's class list picks which. Everything here is
:meth:`nstcam.GradCAM.explain` with the tab's limits; nothing found is said, never an empty gallery.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from PIL import Image

from nstcam.app.errors import refuse
from nstcam.app.guard.limits import MAX_CLASSES
from nstcam.cam import PERTURBATION_METHODS, TARGET_METHODS, CamResult, GradCAM, arch_kind
from nstcam.weights import DETECTORS, SEGMENTERS

__all__ = ["check_found", "class_choices", "findings_or_refusal", "found_caption", "found_row"]


@functools.cache
def class_choices(arch: str) -> list[str]:
    """The class names a detector or a segmenter can be asked for (its official weights' categories,
    without the background and COCO's unused "N/A"); none for a classifier."""
    known = {**DETECTORS, **SEGMENTERS}
    if arch not in known:
        return []
    names = known[arch][1].meta.get("categories", ())
    return [n for n in names if n not in ("__background__", "N/A")]


def check_found(arch: str, method: str, classes: Sequence[str] | None) -> list[str]:
    """Refuses what a detector or a segmenter cannot do, before any model is built; returns the
    classes asked, each once, checked against the model's names and capped at
    :data:`nstcam.app.guard.limits.MAX_CLASSES` (never more than the model knows)."""
    kind = arch_kind(arch)
    if method not in TARGET_METHODS:
        raise refuse(
            f"method {method!r} explains a classifier's classes; a {kind} ({arch}) takes one of "
            f"{', '.join(TARGET_METHODS)}"
        )
    if method in PERTURBATION_METHODS:
        raise refuse(
            f"{method} runs the whole {kind} once per channel of the layer (hundreds of passes of about a "
            f"second each here); on this server a {kind} takes a gradient or activation method such as "
            "gradcam, layercam or eigencam (the Python API runs it: GradCAM(..., method=...))"
        )
    asked = list(dict.fromkeys(c.strip() for c in (classes or []) if c and c.strip()))  # once each
    most = min(MAX_CLASSES, len(class_choices(arch)))
    if len(asked) > most:
        raise refuse(
            f"classes: at most {most} different classes per request on this server, got {len(asked)}"
        )
    unknown = [c for c in asked if c not in class_choices(arch)]
    if unknown:
        known = ", ".join(class_choices(arch))
        raise refuse(f"classes: {', '.join(map(repr, unknown))} unknown to {arch}; it knows {known}")
    return asked


def findings_or_refusal(
    cam: GradCAM,
    img: Image.Image,
    *,
    classes: list[str],
    score_threshold: float,
    max_detections: int,
    top_k: int,
    max_side: int,
    eigen_smooth: bool,
    aug_smooth: bool = False,
) -> list[CamResult]:
    """The results of ``cam`` (a detector or a segmenter) on ``img``: each detection kept, or each
    class picked (none picked: the ``top_k`` largest present).

    Raises:
        gradio.Error: nothing found, with what to change (and, on random weights, why).
    """
    detector = cam.kind == "detector"
    results = cam.explain(
        img,
        classes=classes or None,
        score_threshold=score_threshold,
        max_detections=max_detections,
        top_k=None if detector or classes else top_k,
        max_side=max_side,
        eigen_smooth=eigen_smooth,
        aug_smooth=aug_smooth,
    )
    if results:
        return results
    random = bool(cam.weights and cam.weights.is_random)
    picked = f" of {', '.join(classes)}" if classes else ""
    if detector:
        why = " Random weights find nothing: lower it to 0 to see their boxes." if random else ""
        raise refuse(
            f"{cam.arch} found no detection{picked} scoring {score_threshold:.2f} or more: lower the score "
            f"threshold or pick other classes.{why}"
        )
    why = " (random weights: not meaningful)" if random else ""
    raise refuse(f"{cam.arch} found no class but the background{why}: pick classes to explain them anyway.")


def found_caption(r: CamResult, mark: str) -> str:
    """A result's caption: its label and score, and its box or its share of the image."""
    if r.box is not None:
        x0, y0, x1, y1 = (round(v) for v in r.box)
        return f"{r.label} · score={r.score:.3f} · box ({x0}, {y0}, {x1}, {y1}){mark}"
    if r.mask is not None and not r.mask.any():  # a class picked that the segmenter did not find
        return f"{r.label} · p={r.score:.3f} · not found in the image{mark}"
    share = f" · {100 * float(r.mask.mean()):.1f}% of the image" if r.mask is not None else ""
    return f"{r.label} · p={r.score:.3f}{share}{mark}"


def found_row(rank: int, r: CamResult, mark: str) -> list[Any]:
    """A row of the results table: rank, class index, label (with its box), score."""
    label = r.label if r.box is None else f"{r.label} at ({', '.join(str(round(v)) for v in r.box)})"
    return [rank, r.class_index, label + mark, round(r.score, 4)]
