"""``init="fast"``: the optimisation starts from a pretrained feed-forward network's painting.

Magenta's arbitrary network (:class:`nstcam.fast.FastStyle`, real weights) paints each content image
with the styles' blended style vector in one forward pass; Gatys' optimisation then refines it on the
engine's VGG. With ``preserve_color="histogram"`` the paintings are recoloured to each content first,
with ``"luminance"`` the start is the painting's luminance, as for ``init="style"``. The painting
has the run's ``strength`` (the whole style where a given ``style_weight`` overrides it).

The start means the same whatever else is asked (issue 76): with a style mask optimised in place,
the painting where the mask lets the style in and the photo where it keeps the photo; with a style
per region, each region's own style's painting (regions that overlap: their paintings' mean by
mask, the photo where none reaches); in tiles, the painting of the whole picture (the fast network
paints it in tiles of its own, :mod:`nstcam.fast._tiled`).
"""

from __future__ import annotations

import torch
from PIL import Image

from nstcam.color import luminance_only
from nstcam.image import image_to_tensor, tensor_to_image
from nstcam.style._plan import Plan
from nstcam.style._regions import region_plan
from nstcam.style._runtime import Runtime
from nstcam.style._targets import Targets

__all__ = ["fast_images", "fast_start"]


def fast_images(rt: Runtime, c_in: torch.Tensor, styles: list[Image.Image], plan: Plan) -> torch.Tensor:
    """The fast network's paintings of ``c_in`` (N, 3, H, W) in [0, 1], at that size."""
    from nstcam.fast.engine import shared_fast_style  # the fast engine builds on this package

    fast = shared_fast_style(rt.device)
    strength = plan.extra.get("strength") or 1.0  # a given style_weight: the whole painting
    vec = None if plan.histogram else fast.blend_vector(styles, plan.blend)
    out = []
    for i in range(c_in.shape[0]):
        photo = tensor_to_image(c_in[i : i + 1])
        if plan.histogram:  # each content recolours the paintings before their style is read
            vec = fast.blend_vector([fast.recolored(s, photo) for s in styles], plan.blend)
        out.append(image_to_tensor(fast.stylize(photo, vec, strength=strength), rt.device))
    x = torch.cat(out)
    return luminance_only(x) if plan.luminance else x


def fast_start(
    rt: Runtime, c_in: torch.Tensor, styles: list[Image.Image], plan: Plan, targets: Targets
) -> torch.Tensor:
    """The images to optimise at the run's first scale with ``init="fast"`` where part of the photo
    is kept or each style has its region (``targets.mask``): the painting where the style goes."""
    if targets.regions:
        masks = [r.mask for r in targets.regions]
        painted = [fast_images(rt, c_in, styles, region_plan(plan, i)) for i in range(len(masks))]
        reach = sum(masks)
        x = sum(m * p for m, p in zip(masks, painted, strict=True)) / reach.clamp_min(1)
        x = x + (1 - reach.clamp(0, 1)) * c_in
    else:
        m = targets.mask
        x = m * fast_images(rt, c_in, styles, plan) + (1 - m) * c_in
    return x.detach().clamp(0, 1).contiguous().requires_grad_(True)
