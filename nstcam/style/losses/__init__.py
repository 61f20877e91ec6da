"""The style losses, one module each, and their registry (what the engine, the memory estimate, the
app's choices and the CLI read). A new loss is one module providing a :class:`StyleLoss` and its
line in :data:`REGISTRY`.

- ``gram``: Gatys' Gram matrices (the default).
- ``wasserstein``: each layer's features as a Gaussian, the squared W2 distance.
- ``sliced``: the sliced W2 distance of the whole feature distributions.
"""

from __future__ import annotations

from nstcam._choices import Registry
from nstcam.style.losses import gram, sliced, wasserstein
from nstcam.style.losses.base import StyleLoss

__all__ = ["REGISTRY", "STYLE_LOSSES", "StyleLoss", "style_loss_named"]

_MODULES = (gram, wasserstein, sliced)
REGISTRY: Registry[StyleLoss] = Registry("style_loss", ((m.LOSS.name, m.LOSS) for m in _MODULES))
"""Every style loss: name -> what it provides."""

STYLE_LOSSES = tuple(REGISTRY)
"""The style losses :meth:`nstcam.StyleTransfer.stylize` takes (``style_loss=``)."""


def style_loss_named(name: str) -> StyleLoss:
    """The loss ``name``.

    Raises:
        ValueError: an unknown loss, listing the known ones.
    """
    return REGISTRY.get(name)
