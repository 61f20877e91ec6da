"""Which classes to explain: top-k, one class for all images, or one per image."""

from __future__ import annotations

from typing import Any

import torch

from nstcam._checks import check_targets, whole

__all__ = ["host_targets", "resolve_targets"]


def resolve_targets(logits: torch.Tensor, targets: Any, top_k: int) -> torch.Tensor:
    """(k, N) class indices: row j holds each image's j-th target.

    Raises:
        ValueError: see :func:`host_targets`.
    """
    spec = host_targets(targets, top_k, *logits.shape)
    if isinstance(spec, int):
        return logits.topk(spec, dim=1).indices.T.contiguous()
    return torch.tensor(spec, dtype=torch.long, device=logits.device).unsqueeze(0)


def host_targets(targets: Any, top_k: int, n: int, num_classes: int) -> int | list[int]:
    """What to explain, checked on the host without the logits: ``top_k`` (an int) when
    ``targets`` is None, else one class per image.

    Raises:
        ValueError: ``top_k`` above the number of classes, a target that is not a whole number,
            the wrong number of targets for the batch, or a class out of range.
    """
    if targets is None:
        return whole("top_k", top_k, minimum=1, maximum=num_classes)
    return check_targets(targets, n, num_classes)
