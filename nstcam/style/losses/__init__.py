"""The style losses, one module each, and their registry (what the engine, the memory estimate, the
app's choices and the CLI read). A new loss is one module providing a :class:`StyleLoss` and its
line in :data:`REGISTRY`.

- ``gram``: Gatys' Gram matrices (the default).
- ``wasserstein``: each layer's features as a Gaussian, the squared W2 distance.
- ``sliced``: the sliced W2 distance of the whole feature distributions.
"""

from __future__ import annotations

from nstcam.style.losses import gram, sliced, wasserstein
from nstcam.style.losses.base import StyleLoss

__all__ = ["REGISTRY", "STYLE_LOSSES", "StyleLoss", "style_loss_named"]

REGISTRY: dict[str, StyleLoss] = {m.LOSS.name: m.LOSS for m in (gram, wasserstein, sliced)}
"""Every style loss: name -> what it provides."""

STYLE_LOSSES = tuple(REGISTRY)
"""The style losses :meth:`nstcam.StyleTransfer.stylize` takes (``style_loss=``)."""


def style_loss_named(name: str) -> StyleLoss:
    """The loss ``name``.

    Raises:
        ValueError: an unknown loss, listing the known ones.
    """
    if name not in REGISTRY:
        raise ValueError(f"style_loss must be one of {', '.join(STYLE_LOSSES)}; got {name!r}")
    return REGISTRY[name]
