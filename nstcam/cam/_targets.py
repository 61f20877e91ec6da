"""Which classes to explain: top-k, one class for all images, or one per image."""

from __future__ import annotations

from typing import Any

import torch

from nstcam._checks import check_targets, whole

__all__ = ["resolve_targets"]


def resolve_targets(logits: torch.Tensor, targets: Any, top_k: int) -> torch.Tensor:
    """(k, N) class indices: row j holds each image's j-th target.

    Raises:
        ValueError: ``top_k`` above the number of classes, a target that is not a whole number,
            the wrong number of targets for the batch, or a class out of range.
    """
    n, num_classes = logits.shape
    if targets is None:
        whole("top_k", top_k, minimum=1, maximum=num_classes)
        return logits.topk(top_k, dim=1).indices.T.contiguous()
    values = check_targets(targets, n, num_classes)
    return torch.tensor(values, dtype=torch.long, device=logits.device).unsqueeze(0)
