"""The style engine's loss as a function of images: what trains a feed-forward network on the
hooked VGG (Johnson et al. 2016's perceptual loss), with the plan's layers, weights, layer balance
and style loss, exactly as the optimisation weighs them (issue 65).

One object per caller: its hooks record only its own passes (:class:`~nstcam.hooks.HookManager`),
its style targets are its own, so callers on many threads share one engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from PIL import Image

from nstcam.style._optimize import loss_terms, weighted
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets, style_targets
from nstcam.style.hooks import VGGFeatureHooks

__all__ = ["PerceptualLoss"]


class PerceptualLoss:
    """``loss(images, photos)``: the engine's weighted losses of painted ``images`` against the
    ``photos`` they paint and the style images read at ``plan.size``; a (4, N) tensor (total,
    content, style and total variation of each image), differentiable in ``images``.

    Use it in a ``with`` block (its hooks are on the shared network only inside it).

    Args:
        rt: the engine's network.
        styles: the style images, blended by ``plan.blend``.
        plan: the engine's plan (:meth:`nstcam.StyleTransfer.plan`); masks, regions, tiles and
            colour preservation are the optimisation's own and refused here.
    """

    def __init__(self, rt: Runtime, styles: Sequence[Image.Image], plan: Plan) -> None:
        if plan.tile is not None or plan.preserve_color:
            raise ValueError("a perceptual loss takes neither tile nor preserve_color; leave them unset")
        self.plan = plan
        self._rt, self._styles = rt, list(styles)
        self._hooks = VGGFeatureHooks(rt.net, plan.layers)
        self._targets: Targets | None = None

    def __enter__(self) -> PerceptualLoss:
        self._hooks.__enter__()
        try:
            probe = torch.zeros(1, 3, 1, 1, device=self._rt.device)  # no colour mode: the content unused
            style = style_targets(self._rt, self._hooks, self._styles, self.plan, self.plan.size, probe, {})
        except BaseException:
            self._hooks.__exit__(None, None, None)
            raise
        self._targets = Targets(content={}, style=style)
        return self

    def __exit__(self, *exc: object) -> None:
        self._targets = None
        self._hooks.__exit__(*exc)

    def __call__(self, images: torch.Tensor, photos: torch.Tensor) -> torch.Tensor:
        """(4, N): the weighted total, content, style and tv losses of ``images`` (N, 3, H, W in
        [0, 1]) painting ``photos`` (the same shape)."""
        if self._targets is None:
            raise RuntimeError("use the perceptual loss inside its with block")
        if images.shape != photos.shape:
            raise ValueError(f"images {tuple(images.shape)} and photos {tuple(photos.shape)} differ in shape")
        with torch.no_grad():
            feats = self._rt.features(self._hooks, photos)
        self._targets.content = {n: feats[n].detach().float() for n in self.plan.content_layers}
        return weighted(
            loss_terms(self._rt.features(self._hooks, images), images, self._targets, self.plan), self.plan
        )
