"""``init="fast"``: the optimisation starts from a pretrained feed-forward network's painting.

Magenta's arbitrary network (:class:`nstcam.fast.FastStyle`, real weights) paints each content image
with the styles' blended style vector in one forward pass; Gatys' optimisation then refines it on the
engine's VGG. With ``preserve_color="histogram"`` the paintings are recoloured to each content first,
with ``"luminance"`` the start is the painting's luminance, as for ``init="style"``. The painting
has the run's ``strength`` (the whole style where a given ``style_weight`` overrides it).
"""

from __future__ import annotations

import torch
from PIL import Image

from nstcam.color import luminance_only
from nstcam.image import image_to_tensor, tensor_to_image
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime

__all__ = ["fast_images"]


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
