"""What to explain, beyond a class index: target objects for classifiers, segmenters, detectors and
embedding models, or any callable.

A target scores one image of a batch from the model's output: ``target(output, i)`` returns a
scalar tensor that CAM differentiates (gradient methods) or compares (perturbation methods). Each
target says which output it reads (:attr:`kind`), so a target that does not fit the model (a box
on a classifier) is refused before any work.

Example:
    >>> cam = GradCAM("resnet18", weights="imagenet")
    >>> cam.compute(x, targets=[ClassTarget(281, softmax=True), SimilarityTarget(other_embedding)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from nstcam._checks import whole

__all__ = [
    "BinaryTarget",
    "BoxTarget",
    "ClassTarget",
    "RegionTarget",
    "SimilarityTarget",
    "adjoint_upsample",
    "Target",
    "check_boxes",
    "check_fit",
    "flip_target",
    "is_target_object",
    "per_image",
    "predicted",
]

Target = Callable[[Any, int], torch.Tensor]
"""Any ``f(output, i) -> scalar tensor`` for image ``i`` of the batch."""

KINDS = ("classifier", "segmenter", "detector", "embedding")


@dataclass(frozen=True)
class ClassTarget:
    """Class ``index``'s logit (or, with ``softmax``, its probability) of a classifier."""

    index: int
    softmax: bool = False
    kind = "classifier"

    def __post_init__(self) -> None:
        whole("index", self.index, minimum=0)

    def __call__(self, output: torch.Tensor, i: int) -> torch.Tensor:
        row = output[i].softmax(-1) if self.softmax else output[i]
        if self.index >= row.shape[-1]:
            raise ValueError(f"ClassTarget index {self.index} is out of range: the model has {row.shape[-1]}")
        return row[self.index]


@dataclass(frozen=True)
class BinaryTarget:
    """A single-logit model's output, for the positive class (or, ``positive=False``, the negative)."""

    positive: bool = True
    kind = "classifier"

    def __call__(self, output: torch.Tensor, i: int) -> torch.Tensor:
        y = output[i].reshape(-1)
        if y.numel() != 1:
            raise ValueError(
                f"BinaryTarget reads a single-logit output; this model gives {y.numel()} per image"
            )
        return y[0] if self.positive else -y[0]


@dataclass(frozen=True)
class RegionTarget:
    """A segmentation model's class-``index`` logits summed over a region.

    Args:
        index: the class.
        mask: an (H, W) array or tensor (soft weights allowed) at the output's size or any size
            (resized bilinearly); a box ``(x0, y0, x1, y1)`` in the output's pixels; or None for
            the pixels the model predicts as ``index``.
    """

    index: int
    mask: Any = field(default=None, compare=False)
    kind = "segmenter"

    def __post_init__(self) -> None:
        whole("index", self.index, minimum=0)
        if isinstance(self.mask, (tuple, list)) and len(self.mask) != 4:
            raise ValueError(f"RegionTarget mask as a box is (x0, y0, x1, y1), got {self.mask!r}")

    def flipped(self, width: int) -> RegionTarget:
        """The same region in the image flipped left to right (``width``: the output's width)."""
        if self.mask is None:
            return self
        if isinstance(self.mask, (tuple, list)):
            x0, y0, x1, y1 = self.mask
            return RegionTarget(self.index, (width - x1, y0, width - x0, y1))
        return RegionTarget(self.index, torch.as_tensor(self.mask).flip(-1))

    def weights(self, logits: torch.Tensor) -> torch.Tensor:
        """The (H, W) weights of the region over ``logits`` (C, H, W) of one image."""
        h, w = logits.shape[-2:]
        if self.mask is None:
            return (predicted(logits) == self.index).to(logits.dtype)
        if isinstance(self.mask, (tuple, list)):
            x0, y0, x1, y1 = (float(v) for v in self.mask)
            if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
                raise ValueError(f"RegionTarget box {self.mask} is outside the {w}x{h} px output")
            m = torch.zeros(h, w, dtype=logits.dtype, device=logits.device)
            m[int(y0) : round(y1), int(x0) : round(x1)] = 1
            return m
        m = torch.as_tensor(self.mask, dtype=logits.dtype, device=logits.device)
        if m.ndim != 2:
            raise ValueError(f"RegionTarget mask must be (H, W), got shape {tuple(m.shape)}")
        if m.shape != (h, w):
            m = F.interpolate(m[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        return m

    def __call__(self, output: torch.Tensor, i: int) -> torch.Tensor:
        logits = output[i]
        if self.index >= logits.shape[0]:
            raise ValueError(
                f"RegionTarget index {self.index} is out of range: the model has {logits.shape[0]}"
            )
        weights = self.weights(logits.detach())
        low = getattr(output, "low_res", None)  # the logits before the model's bilinear upsampling
        if low is not None:  # sum(w * up(l)) = sum(up*(w) * l): the region read at low resolution
            return (low[i, self.index] * adjoint_upsample(weights, tuple(low.shape[-2:]))).sum()
        return (logits[self.index] * weights).sum()


@dataclass(frozen=True)
class BoxTarget:
    """A detector's score for its prediction that best overlaps ``box`` with label ``label``.

    The score is that prediction's IoU with ``box`` plus its class score (pytorch-grad-cam's
    ``FasterRCNNBoxScoreTarget``); 0 when no prediction with that label overlaps by ``iou`` or more.
    Works for every torchvision detector (Faster/Mask R-CNN, RetinaNet, FCOS, SSD).

    Args:
        label: the class index.
        box: ``(x0, y0, x1, y1)`` in the input's pixels.
        iou: the least overlap that counts.
    """

    label: int
    box: Sequence[float]
    iou: float = 0.5
    kind = "detector"

    def __post_init__(self) -> None:
        whole("label", self.label, minimum=0)
        if len(self.box) != 4 or not self.box[0] < self.box[2] or not self.box[1] < self.box[3]:
            raise ValueError(
                f"BoxTarget box is (x0, y0, x1, y1) with x0 < x1 and y0 < y1, got {tuple(self.box)}"
            )

    def flipped(self, width: int) -> BoxTarget:
        """The same box in the image flipped left to right (``width``: the input's width)."""
        x0, y0, x1, y1 = self.box
        return BoxTarget(self.label, (width - x1, y0, width - x0, y1), self.iou)

    def __call__(self, output: Sequence[dict[str, torch.Tensor]], i: int) -> torch.Tensor:
        from torchvision.ops import box_iou

        det = output[i]
        scores = det["scores"]
        if det["boxes"].shape[0] == 0:
            return scores.sum() * 0
        ref = torch.tensor([list(map(float, self.box))], dtype=det["boxes"].dtype, device=det["boxes"].device)
        ious = box_iou(ref, det["boxes"])[0]
        best = int(ious.argmax())
        if float(ious[best].detach()) < self.iou or int(det["labels"][best]) != self.label:
            return scores.sum() * 0
        return ious[best] + scores[best]


@dataclass(frozen=True)
class SimilarityTarget:
    """The cosine similarity of the model's output for image ``i`` (an embedding, a backbone's pooled
    features, flattened) to ``embedding``: "what here looks like this other photo?"."""

    embedding: Any = field(compare=False)
    kind = "embedding"

    def __call__(self, output: torch.Tensor, i: int) -> torch.Tensor:
        e = torch.as_tensor(self.embedding, dtype=output.dtype, device=output.device).reshape(-1)
        y = output[i].reshape(-1)
        if y.numel() != e.numel():
            raise ValueError(
                f"SimilarityTarget embedding has {e.numel()} values; the model gives {y.numel()} per image"
            )
        return F.cosine_similarity(y, e, dim=0)


def adjoint_upsample(weights: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The adjoint of bilinear upsampling (``align_corners=False``) from ``size`` to the weights'
    size, applied to (H, W) ``weights``: the (h, w) map ``m`` with ``sum(m * l) = sum(weights * up(l))``.

    Bilinear upsampling is separable, ``up(l) = A l B^T`` with (H, h) and (W, w) linear-interpolation
    matrices, so its adjoint is ``A^T weights B``: two small matrix products."""
    a = _linear_matrix(size[0], weights.shape[0], weights)
    b = _linear_matrix(size[1], weights.shape[1], weights)
    return a.T @ weights @ b


def _linear_matrix(n: int, size: int, like: torch.Tensor) -> torch.Tensor:
    """The (size, n) matrix of linear upsampling from n to size points (``align_corners=False``)."""
    eye = torch.eye(n, dtype=like.dtype, device=like.device)[None]
    return F.interpolate(eye, size=size, mode="linear", align_corners=False)[0].T


def check_boxes(targets: Sequence[Target], width: int, height: int) -> None:
    """Refuses, before any work, a :class:`BoxTarget` box or a :class:`RegionTarget` box outside the
    ``width`` x ``height`` input (boxes are in the input's pixels).

    Raises:
        ValueError: naming the target, the box and the image's size.
    """
    for t in targets:
        box = t.box if isinstance(t, BoxTarget) else t.mask if isinstance(t, RegionTarget) else None
        if isinstance(box, (tuple, list)):
            x0, y0, x1, y1 = (float(v) for v in box)
            if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
                raise ValueError(
                    f"{type(t).__name__} box {tuple(box)} is outside the {width}x{height} px input: boxes "
                    "are (x0, y0, x1, y1) in the input's pixels"
                )


def flip_target(target: Target, width: int) -> Target:
    """``target`` for the image flipped left to right (``aug_smooth``): a region's mask or a box
    flipped; a class, a single logit or a similarity as it is.

    Raises:
        ValueError: a callable, which cannot say how it follows a flip.
    """
    if isinstance(target, (ClassTarget, BinaryTarget, SimilarityTarget)):
        return target
    if isinstance(target, (RegionTarget, BoxTarget)):
        return target.flipped(width)
    raise ValueError(
        "aug_smooth flips the image, and a callable target cannot say how it follows: give a target "
        "object of nstcam.cam.targets, or leave aug_smooth off"
    )


def predicted(logits: torch.Tensor) -> torch.Tensor:
    """The class each pixel is predicted as: the argmax of (C, H, W) ``logits`` over classes, by
    ``max`` (the same indices, faster than ``argmax`` over the first dimension on a CPU)."""
    return logits.detach().max(0).indices


def is_target_object(target: Any) -> bool:
    """A target object or callable, not a class index (or a list of them)."""
    return callable(target) and not isinstance(target, (int, torch.Tensor))


def per_image(targets: Any, n: int) -> list[Target] | None:
    """One target per image from one target for all or one per image; None where ``targets`` are
    class indices (the classifier path).

    Raises:
        ValueError: the wrong number of targets for the batch, or class indices mixed with objects.
    """
    if is_target_object(targets):
        return [targets] * n
    if isinstance(targets, (list, tuple)) and targets and any(is_target_object(t) for t in targets):
        if not all(is_target_object(t) for t in targets):
            raise ValueError("targets mixes class indices and target objects; give one kind")
        if len(targets) != n:
            raise ValueError(
                f"targets has {len(targets)} entries for a batch of {n} images; give one per image"
            )
        return list(targets)
    return None


def check_fit(targets: Sequence[Target], kind: str) -> None:
    """Refuses, before any work, a target that reads another kind of output than the model gives.

    Raises:
        ValueError: e.g. a :class:`BoxTarget` on a classifier; the message names both.
    """
    for t in targets:
        wants = getattr(t, "kind", None)
        fits = wants is None or wants == kind or (wants == "embedding" and kind == "classifier")
        if not fits:
            raise ValueError(
                f"{type(t).__name__} reads a {wants}'s output; this model is a {kind}: use {_fitting(kind)}"
            )


def _fitting(kind: str) -> str:
    return {
        "classifier": "a class index, ClassTarget, BinaryTarget or SimilarityTarget",
        "segmenter": "RegionTarget",
        "detector": "BoxTarget",
        "embedding": "SimilarityTarget",
    }[kind]
