"""An engine like another, with another method, layer or model: what the trust report and
``target_layer="auto"`` build to compare methods and layers on one model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

__all__ = ["sibling"]


def sibling(
    cam: Any,
    *,
    method: str | None = None,
    layer: str | Sequence[str] | None = None,
    model: nn.Module | None = None,
) -> Any:
    """A new engine of ``cam``'s class with its device, preprocessing, input size, frames and seed,
    and ``method``, ``layer`` or ``model`` where given (else ``cam``'s own)."""
    return type(cam)(
        model=model if model is not None else cam.model,
        target_layer=layer if layer is not None else list(cam.target_layers),
        method=method or cam.method,
        device=cam.device,
        transform=cam.preprocessing,
        input_size=cam.input_size,
        frames=cam.frames,
        seed=cam.seed,
    )
