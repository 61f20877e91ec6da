"""What kind of model this is: ``"detector"``, ``"segmenter"`` or ``"classifier"`` (which also gives
embeddings). The one definition, for a built model and for a registered architecture's name."""

from __future__ import annotations

from torch import nn

from nstcam.weights import DETECTORS, SEGMENTERS

__all__ = ["KINDS", "arch_kind", "model_kind"]

KINDS = ("classifier", "segmenter", "detector")


def model_kind(model: nn.Module) -> str:
    """The kind of a built model, from its torchvision family."""
    from torchvision.models import detection, segmentation
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN
    from torchvision.models.detection.ssd import SSD

    if isinstance(model, (GeneralizedRCNN, detection.RetinaNet, detection.FCOS, SSD)):
        return "detector"
    if isinstance(model, (segmentation.LRASPP, segmentation.DeepLabV3, segmentation.FCN)):
        return "segmenter"
    return "classifier"


def arch_kind(arch: str) -> str:
    """The kind of a registered architecture, from its name alone (no model built)."""
    return "detector" if arch in DETECTORS else "segmenter" if arch in SEGMENTERS else "classifier"
