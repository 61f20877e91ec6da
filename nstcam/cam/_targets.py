"""Which classes to explain: top-k, one class for all images, or one per image."""

from __future__ import annotations

from typing import Any

import torch

from nstcam._checks import whole

__all__ = ["check_targets", "resolve_targets"]


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


def check_targets(targets: Any, n: int, num_classes: int) -> list[int]:
    """One class index per image, from one class for all or one per image, checked on the host.

    Raises:
        ValueError: a target that is not a whole number, the wrong number of targets for the
            batch, or a class out of range.
    """
    if isinstance(targets, torch.Tensor):
        if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
            raise ValueError(f"targets must hold class indices (integers), got a {targets.dtype} tensor")
        targets = targets.tolist()
    if isinstance(targets, (list, tuple, range)) or hasattr(targets, "__array__"):
        values = [whole("targets", v) for v in (targets.tolist() if hasattr(targets, "tolist") else targets)]
        if len(values) != n:
            raise ValueError(
                f"targets has {len(values)} entries for a batch of {n} images; give one per image"
            )
    else:
        values = [whole("target", targets)] * n
    bad = [v for v in values if not 0 <= v < num_classes]
    if bad:
        raise ValueError(
            f"target class {bad[0]} is out of range: the model has {num_classes} classes "
            f"(0-{num_classes - 1})"
        )
    return values
