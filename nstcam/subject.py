"""Subject-aware style transfer: Grad-CAM decides where the style goes, and a before/after report
says whether the classifier still recognises the subject.

Example:
    >>> res = subject_aware_stylize("cat.jpg", "starry.jpg", mode="background", size=512)
    >>> res.image.save("cat_bg_starry.png"); print(res.report.to_dict())
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from nstcam.cam import CamResult, GradCAM
from nstcam.image import ImageSource, load_image
from nstcam.mask import heatmap_to_mask
from nstcam.style import StyleTransfer

__all__ = [
    "RecognitionReport",
    "SubjectAwareResult",
    "map_iou",
    "recognition_report",
    "segment_mask",
    "subject_aware_stylize",
]

MODES = ("background", "subject")


def map_iou(a: np.ndarray, b: np.ndarray, threshold: float = 0.5) -> float:
    """IoU of two [0, 1] maps thresholded at ``threshold`` (``b`` is resized to ``a`` if needed).

    Two empty regions count as identical (IoU 1).
    """
    if a.shape != b.shape:
        b = np.asarray(
            Image.fromarray(b.astype(np.float32), "F").resize((a.shape[1], a.shape[0]), Image.BILINEAR)
        )
    ma, mb = a >= threshold, b >= threshold
    union = np.logical_or(ma, mb).sum()
    return 1.0 if union == 0 else float(np.logical_and(ma, mb).sum() / union)


@dataclass
class RecognitionReport:
    """Does the classifier still see the same thing after stylisation?

    Attributes:
        before: top-k Grad-CAM results on the original.
        after: top-k Grad-CAM results on the stylised image.
        after_same_class: Grad-CAM on the stylised image for the original's top-1 class.
        iou: IoU of the thresholded maps of the original's top-1 class, before vs after.
        threshold: the threshold used for the IoU.
    """

    before: list[CamResult]
    after: list[CamResult]
    after_same_class: CamResult
    iou: float
    threshold: float

    @property
    def same_top1(self) -> bool:
        """The stylised image's top-1 class is the original's."""
        return self.before[0].class_index == self.after[0].class_index

    @property
    def kept_in_top_k(self) -> bool:
        """The original's top-1 class is still among the stylised image's top-k."""
        return self.before[0].class_index in [r.class_index for r in self.after]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        top = self.before[0]
        return {
            "class": top.label,
            "class_index": top.class_index,
            "score_before": round(top.score, 6),
            "score_after": round(self.after_same_class.score, 6),
            "same_top1": self.same_top1,
            "kept_in_top_k": self.kept_in_top_k,
            "iou": round(self.iou, 4),
            "threshold": self.threshold,
            "before": [r.to_dict() for r in self.before],
            "after": [r.to_dict() for r in self.after],
        }

    def summary(self) -> str:
        """One line for people, e.g. ``still a tabby: yes (0.82 -> 0.61), map IoU 0.74``."""
        top = self.before[0]
        verdict = "yes" if self.same_top1 else ("in top-k" if self.kept_in_top_k else "no")
        random = top.weights is not None and top.weights.is_random
        note = " [RANDOM weights: not meaningful]" if random else ""
        return (
            f"still a {top.label}: {verdict} ({top.score:.2f} -> {self.after_same_class.score:.2f}), "
            f"map IoU {self.iou:.2f}{note}"
        )


def recognition_report(
    original: ImageSource, stylized: ImageSource, cam: GradCAM, *, top_k: int = 3, threshold: float = 0.5
) -> RecognitionReport:
    """Top-k classes with their Grad-CAMs for both images, and the overlap of the original's top-1 map."""
    before = cam.explain(original, top_k=top_k)
    after = cam.explain(stylized, top_k=top_k)
    same = next((r for r in after if r.class_index == before[0].class_index), None)
    if same is None:
        same = cam.explain(stylized, target=before[0].class_index)[0]
    iou = map_iou(before[0].heatmap, same.heatmap, threshold)
    return RecognitionReport(before, after, same, iou, threshold)


@dataclass
class SubjectAwareResult:
    """What :func:`subject_aware_stylize` returns.

    Attributes:
        image: the stylised image.
        mask: the style mask used (float32 H x W at the content's size, 1 = styled).
        saliency: the Grad-CAM result the mask came from.
        report: the before/after recognition report (None if not asked for).
    """

    image: Image.Image
    mask: np.ndarray
    saliency: CamResult
    report: RecognitionReport | None


def subject_mask(
    image: ImageSource,
    cam: GradCAM,
    *,
    target: int | None = None,
    mode: str = "background",
    threshold: float = 0.4,
    feather: float = 8.0,
    dilate: int = 4,
) -> tuple[np.ndarray, CamResult]:
    """The style mask (float32 H x W, 1 = styled) that Grad-CAM's saliency gives, and that saliency.

    ``mode="background"`` styles everything but the subject, ``"subject"`` only the subject; see
    :func:`nstcam.heatmap_to_mask` for ``threshold``, ``feather`` and ``dilate``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be 'background' or 'subject', got {mode!r}")
    saliency = cam.explain(image, target=target, top_k=1)[0]
    subject = heatmap_to_mask(saliency.heatmap, threshold=threshold, dilate=dilate, feather=feather)
    mask = 1.0 - subject if mode == "background" else subject
    return mask.astype(np.float32), saliency


def segment_mask(
    image: ImageSource,
    masker: GradCAM,
    classes: Sequence[int | str] | None = None,
    *,
    mode: str = "background",
    feather: float = 8.0,
    dilate: int = 4,
) -> tuple[np.ndarray, CamResult]:
    """The style mask (float32 H x W, 1 = styled) from a segmenter's predicted pixels of ``classes``
    (names or indices; None: every class it finds but the background), and the largest class's
    result (its map, its ``mask``).

    Raises:
        ValueError: ``masker`` is not a segmenter, an unknown class, or none of the classes is there.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be 'background' or 'subject', got {mode!r}")
    if masker.kind != "segmenter":
        raise ValueError(
            f"masker must be a segmenter (deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large...); "
            f"{masker.arch} is a {masker.kind}"
        )
    results = masker.explain(image, classes=classes)
    found = [r for r in results if r.mask is not None and r.mask.any()]
    if not found:
        asked = ", ".join(map(str, classes)) if classes else "any class"
        why = (
            " (random weights: not meaningful)"
            if masker.weights is not None and masker.weights.is_random
            else ""
        )
        raise ValueError(f"classes: the segmenter found no pixel of {asked} in the image{why}")
    union = np.logical_or.reduce([r.mask for r in found]).astype(np.float32)
    subject = heatmap_to_mask(union, threshold=0.5, dilate=dilate, feather=feather)
    mask = 1.0 - subject if mode == "background" else subject
    return mask.astype(np.float32), max(found, key=lambda r: r.mask.mean())


def subject_aware_stylize(
    content: ImageSource,
    style: ImageSource | list[ImageSource],
    *,
    engine: StyleTransfer | None = None,
    cam: GradCAM | None = None,
    target: int | None = None,
    mode: str = "background",
    threshold: float = 0.4,
    feather: float = 8.0,
    dilate: int = 4,
    report: bool = True,
    top_k: int = 3,
    weights: str = "imagenet",
    on_mask: Callable[[np.ndarray, CamResult], None] | None = None,
    masker: str | GradCAM | None = None,
    classes: Sequence[int | str] | None = None,
    **stylize_params: Any,
) -> SubjectAwareResult:
    """Stylises the background and keeps the subject (or the reverse), where Grad-CAM finds it.

    Args:
        content: the content image.
        style: one style image or a list to blend.
        engine: the :class:`StyleTransfer` to use (default: built with ``weights``).
        cam: the :class:`GradCAM` to use (default: resnet50 built with ``weights``).
        target: the class whose saliency defines the subject (default: the top-1 class).
        mode: ``"background"`` styles everything but the subject; ``"subject"`` styles only it.
        threshold: saliency above which a pixel belongs to the subject.
        feather: softness of the mask edge (Gaussian sigma, pixels of the content image).
        dilate: grow the subject by this many pixels before feathering.
        report: also compute the before/after :class:`RecognitionReport`.
        top_k: classes in the report.
        weights: weights of the default engines.
        on_mask: called with the mask and its saliency as soon as they exist, before the
            stylisation starts (a front end shows the mask while the previews stream).
        masker: take the subject from a segmenter's predicted pixels instead of Grad-CAM's saliency:
            a segmenter's name (``"deeplabv3_mobilenet_v3_large"``, built with ``weights``) or a
            :class:`GradCAM` of one; ``classes`` (names or indices, e.g. ``["person"]``) are the
            subject (None: every class it finds). The report still asks the classifier ``cam``.
        **stylize_params: passed to :meth:`StyleTransfer.stylize` (``mask_mode="blend"`` for a
            post-hoc blend instead of masked losses).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be 'background' or 'subject', got {mode!r}")
    img = load_image(content)
    engine = engine or StyleTransfer(weights)
    cam = cam or GradCAM("resnet50", weights=weights)
    if masker is not None:
        seg = masker if isinstance(masker, GradCAM) else GradCAM(masker, weights=weights)
        mask, saliency = segment_mask(img, seg, classes, mode=mode, feather=feather, dilate=dilate)
    else:
        mask, saliency = subject_mask(
            img, cam, target=target, mode=mode, threshold=threshold, feather=feather, dilate=dilate
        )
    if on_mask is not None:
        on_mask(mask, saliency)
    out = engine.stylize(img, style, style_mask=mask, **stylize_params)
    out.info["nstcam"]["subject_aware"] = {
        "mode": mode,
        "threshold": threshold,
        "feather": feather,
        "dilate": dilate,
        "class_index": saliency.class_index,
        "label": saliency.label,
        **(
            {
                "masker": masker if isinstance(masker, str) else masker.arch,
                "classes": list(classes) if classes else None,
            }
            if masker is not None
            else {}
        ),
    }
    rep = recognition_report(img, out, cam, top_k=top_k) if report else None
    return SubjectAwareResult(out, mask, saliency, rep)
