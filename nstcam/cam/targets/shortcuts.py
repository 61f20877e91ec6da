"""Cheaper graphs to the same scores: a torchvision detector's or segmenter's output rebuilt, with
the same values and the same gradients, from what its one forward pass recorded.

A target reads the model's final output, and its gradient flows back through everything that made
it. Two torchvision stages cost far more in backward than the score needs:

- **Faster/Mask R-CNN**: the box head pools all of the RPN's ~1000 proposals (``roi_align``), and
  its backward scatters the gradient of every one of them, although a detection's score depends on
  its own proposal only. :class:`RcnnShortcut` finds each detection's proposal (the one whose
  decoded box and class score equal the detection's) and recomputes the detections from those
  proposals alone: the backward pools at most ``detections_per_img`` boxes instead of all.
- **Segmenters** (DeepLabV3, FCN, LR-ASPP): the output is the head's low-resolution logits
  upsampled to the input's size, and the backward of that upsampling runs over every class's
  channel although a region target's gradient is zero outside its class. :class:`SegmenterShortcut`
  upsamples only the channels whose gradient is not zero, and hands a region target the
  low-resolution logits (``low_res``), which it weighs by the adjoint of the upsampling.

The R-CNN shortcut checks its recomputed detections against the model's own and gives the output
unchanged (the full graph) where they differ; both record with the shared
:class:`~nstcam.hooks.HookManager`, so they see
only their own caller's pass.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.hooks import HookManager

__all__ = ["RcnnShortcut", "SegmenterShortcut", "shortcut"]

logger = logging.getLogger(__name__)


def shortcut(model: nn.Module, layer: str) -> HookManager | None:
    """The shortcut for ``model`` explained at ``layer``, or None where none applies (another model,
    a subclass with its own ``forward``, or a layer after the stage a shortcut recomputes)."""
    from torchvision.models import segmentation
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.roi_heads import RoIHeads

    if isinstance(model, GeneralizedRCNN) and type(model.roi_heads) is RoIHeads and _in(layer, "backbone"):
        return RcnnShortcut(model)
    if type(model) in (segmentation.DeepLabV3, segmentation.FCN, segmentation.LRASPP) and _in(
        layer, "backbone"
    ):
        return SegmenterShortcut(model)
    return None


def _in(layer: str, stage: str) -> bool:
    return layer == stage or layer.startswith(stage + ".")


class RcnnShortcut(HookManager):
    """Records a Faster/Mask R-CNN's features, proposals and box predictions; :meth:`rebuild` gives its
    detections recomputed from their own proposals only."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model, ["transform", "backbone", "rpn", "roi_heads.box_predictor"])

    def rebuild(self, out: list[dict[str, torch.Tensor]], x: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """``out`` (the model's detections for the batch ``x``) with ``boxes`` and ``scores`` whose
        graph runs through their own proposals; ``out`` itself where a detection is not found."""
        rec = _records(self)
        heads = self.model.roi_heads
        sizes = rec["transform"][0].image_sizes
        proposals = rec["rpn"][0]
        logits, deltas = (t.detach() for t in rec["roi_heads.box_predictor"])
        rebuilt = []
        start = 0
        for i, det in enumerate(out):
            n = proposals[i].shape[0]
            picked = _proposals_of(
                heads,
                det,
                logits[start : start + n],
                deltas[start : start + n],
                proposals[i],
                sizes[i],
                tuple(x.shape[-2:]),
            )
            start += n
            if picked is None:
                logger.debug("R-CNN shortcut: a detection of image %d has no exact proposal; full graph", i)
                return out
            features = {k: v[i : i + 1] for k, v in rec["backbone"].items()}  # image i's levels
            boxes, scores = _detections(
                heads, features, proposals[i][picked], det["labels"], sizes[i], tuple(x.shape[-2:])
            )
            if not _same(boxes, det["boxes"], 1e-3) or not _same(scores, det["scores"], 1e-5):
                logger.debug("R-CNN shortcut: recomputed detections of image %d differ; full graph", i)
                return out
            rebuilt.append({**det, "boxes": boxes, "scores": scores})
        return rebuilt


def _records(hooks: HookManager) -> dict[str, Any]:
    """What ``hooks`` recorded; its hooks removed, as the recomputation runs modules they are on."""
    rec = dict(hooks.outputs)
    hooks.remove()
    return rec


def _decoded(heads, logits, deltas, proposals, size, original) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, classes, 4) boxes in the original image's pixels and (P, classes) scores, as the model's
    postprocessing computes them."""
    from torchvision.models.detection.transform import resize_boxes
    from torchvision.ops import boxes as box_ops

    boxes = box_ops.clip_boxes_to_image(heads.box_coder.decode(deltas, [proposals]), size)
    return resize_boxes(boxes.reshape(-1, 4), size, original).reshape(boxes.shape), F.softmax(logits, -1)


def _proposals_of(heads, det, logits, deltas, proposals, size, original) -> torch.Tensor | None:
    """The index of each detection's proposal (its decoded box and score equal the detection's), or
    None where one has no such proposal."""
    labels = det["labels"]
    if labels.numel() == 0:
        return labels
    with torch.no_grad():
        boxes, scores = _decoded(heads, logits, deltas, proposals, size, original)
        cand_boxes, cand_scores = boxes[:, labels], scores[:, labels]  # (P, K, 4), (P, K)
        err = (cand_boxes - det["boxes"].detach()).abs().amax(-1)
        err += (cand_scores - det["scores"].detach()).abs()
        best, picked = err.min(0)
    return picked if float(best.max()) <= 1e-3 else None


def _detections(heads, features, proposals, labels, size, original) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, 4) boxes and (K,) scores of class ``labels`` from ``proposals`` alone, with their graph;
    ``features``: one image's levels."""
    with torch.enable_grad():
        pooled = heads.box_roi_pool(features, [proposals], [size])
        logits, deltas = heads.box_predictor(heads.box_head(pooled))
        boxes, scores = _decoded(heads, logits, deltas, proposals, size, original)
        rows = torch.arange(labels.numel(), device=labels.device)
        return boxes[rows, labels], scores[rows, labels]


def _same(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and (a.numel() == 0 or float((a.detach() - b.detach()).abs().max()) <= tol)


class SegmenterShortcut(HookManager):
    """Records a torchvision segmenter's low-resolution logits; :meth:`rebuild` gives its ``"out"``
    with a backward that upsamples only the classes a target reads."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model, ["classifier"])

    def rebuild(self, out: Any, x: torch.Tensor) -> Any:
        """``out`` (the model's ``{"out": ...}``) with the same ``"out"`` values and a cheaper
        backward. The shortcut is taken for torchvision's own classes only, whose ``forward`` makes
        ``"out"`` the classifier's logits upsampled bilinearly (``align_corners=False``)."""
        low, full = _records(self).get("classifier"), out["out"]
        if not isinstance(low, torch.Tensor) or not low.requires_grad or low.shape[:2] != full.shape[:2]:
            return out
        rebuilt = _Upsampled.apply(low, full.detach())
        rebuilt.low_res = low  # a region target sums over it through the upsampling's adjoint
        return {**out, "out": rebuilt}


class _Upsampled(torch.autograd.Function):
    """Returns the model's upsampled logits; backward upsamples (adjointly) only the channels with a
    gradient, where autograd's would run over every class."""

    @staticmethod
    def forward(ctx: Any, low: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(low)
        return full.view_as(full)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (low,) = ctx.saved_tensors
        used = grad.ne(0).flatten(2).any(-1).any(0).nonzero().flatten()  # the classes a target read
        out = torch.zeros_like(low)
        if used.numel():
            with torch.enable_grad():
                part = low.detach()[:, used].requires_grad_(True)
                up = F.interpolate(part, size=grad.shape[-2:], mode="bilinear", align_corners=False)
                (g,) = torch.autograd.grad(up, part, grad[:, used])
            out[:, used] = g
        return out, None
