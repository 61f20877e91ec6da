"""Issue 64: a photo's black and white pixels move under the default optimiser.

L-BFGS sees the image through a clamp to [0, 1]; torch's ``clamp`` passes no gradient at its
bounds, so every pixel that was exactly 0 or 1 (clipped shadows and skies) had none and never
moved: a black-and-white silhouette came back unchanged. ``nstcam.style._optimize.in_range``
passes it at the bounds. The real-weights check (the judge's style move against the mid-tone
twin's) is a claim of ``tests/benchmarks/bench_style_real.py --claims``.
"""

from __future__ import annotations

import numpy as np
import torch
from conftest import RANDOM_STYLE_WEIGHT, pattern
from PIL import Image

from nstcam.style import StyleTransfer
from nstcam.style._optimize import in_range


def test_in_range_passes_the_gradient_at_the_bounds_and_holds_pixels_past_them():
    x = torch.tensor([0.0, 0.5, 1.0, -0.1, 1.1], requires_grad=True)
    y = in_range(x)
    (y * torch.arange(1.0, 6.0)).sum().backward()
    assert torch.equal(y.detach(), torch.tensor([0.0, 0.5, 1.0, 0.0, 1.0]))
    assert torch.equal(x.grad, torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0]))  # 0 and 1 pass; past them, held
    plain = torch.tensor([0.0, 1.0], requires_grad=True)
    plain.clamp(0, 1).sum().backward()
    assert torch.equal(plain.grad, torch.zeros(2))  # the cause: torch's clamp passes none at its bounds


def _silhouette() -> Image.Image:
    grey = np.asarray(pattern(3).convert("L").resize((64, 48)))
    return Image.fromarray(np.stack([np.where(grey > grey.mean(), 255, 0).astype(np.uint8)] * 3, -1))


def test_a_black_and_white_photo_moves_under_lbfgs_as_its_mid_tone_twin():
    st = StyleTransfer("random", device="cpu")  # random weights: the optimiser's arithmetic, not a painting
    clipped = _silhouette()
    mid = Image.fromarray((25 + np.asarray(clipped, np.float32) * (204 / 255)).round().astype(np.uint8))
    kw = dict(size=64, steps=8, seed=0, style_weight=RANDOM_STYLE_WEIGHT)
    change = {}
    for name, photo in (("clipped", clipped), ("mid", mid)):
        out = st.stylize(photo, pattern(2), **kw)
        losses = [h["total"] for h in out.info["nstcam"]["history"]]
        assert min(losses) < 0.9 * losses[0], (name, losses)  # the loss falls: L-BFGS moved
        change[name] = float(np.abs(np.asarray(out, np.float32) - np.asarray(photo, np.float32)).mean())
    # before: 0.0/255 for the silhouette (no pixel at 0 or 1 had a gradient); now 41 vs the twin's 29
    assert change["clipped"] > 0.5 * change["mid"] > 0, change
