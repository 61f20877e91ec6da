"""Which classes to explain: top-k, one class for all images, or one per image."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["resolve_targets"]


def resolve_targets(logits: torch.Tensor, targets: Any, top_k: int) -> torch.Tensor:
    """(k, N) class indices: row j holds each image's j-th target.

    Raises:
        ValueError: wrong number of targets for the batch, or a class out of range.
    """
    n, num_classes = logits.shape
    if targets is None:
        k = min(top_k, num_classes)
        return logits.topk(k, dim=1).indices.T.contiguous()
    if isinstance(targets, int) or (isinstance(targets, torch.Tensor) and targets.ndim == 0):
        t = torch.full((n,), int(targets), dtype=torch.long)
    else:
        t = torch.as_tensor(list(targets) if not isinstance(targets, torch.Tensor) else targets).long().cpu()
        if t.ndim != 1 or len(t) != n:
            raise ValueError(f"targets has {t.numel()} entries for a batch of {n} images; give one per image")
    bad = [int(v) for v in t if not 0 <= int(v) < num_classes]
    if bad:
        raise ValueError(
            f"target class {bad[0]} is out of range: the model has {num_classes} classes "
            f"(0-{num_classes - 1})"
        )
    return t.to(logits.device).unsqueeze(0)
