"""What an explanation returns: :class:`CamResult`, and how faithful its maps are
(:func:`evaluate_maps`: the metrics of :mod:`nstcam.metrics` beside a random map's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from nstcam._mark import tag_weights
from nstcam.cam._maps import upsample_maps
from nstcam.cam.overlay import mark_region, overlay_heatmap
from nstcam.metrics import Faithfulness, centre_gaussian, faithfulness, random_map
from nstcam.weights import WeightsInfo

__all__ = ["CamResult", "evaluate_maps"]


@dataclass
class CamResult:
    """One class's explanation of one image.

    Attributes:
        heatmap: float32 H x W in [0, 1] at the original image's size.
        raw: the map at the layer's resolution, before upsampling (ReLU applied, not normalised).
        class_index: the class explained.
        label: its name.
        score: its softmax probability.
        image: the input image (RGB).
        method: the CAM method.
        layer: the target layer.
        weights: where the model's weights came from.
        faithfulness: with ``explain(evaluate=True)``, how faithful the map is
            (:class:`nstcam.metrics.Faithfulness`), else None.
        baseline: the same metrics for a random map (seed 0) on the map's own grid, upsampled as the
            map is, to read ``faithfulness`` against (see :func:`evaluate_maps`).
        centre: the same metrics for a Gaussian blob at the image's centre (the centre bias).
        box: a detector's result: the detection's box ``(x0, y0, x1, y1)`` in the image's pixels.
        mask: a segmenter's result: the class's predicted pixels (bool H x W at the image's size).
    """

    heatmap: np.ndarray
    raw: np.ndarray
    class_index: int
    label: str
    score: float
    image: Image.Image = field(repr=False)
    method: str = "gradcam"
    layer: str = "layer4"
    weights: WeightsInfo | None = field(default=None, repr=False)
    colormap: str = "jet"
    alpha: float = 0.5
    faithfulness: Faithfulness | None = None
    baseline: Faithfulness | None = field(default=None, repr=False)
    centre: Faithfulness | None = field(default=None, repr=False)
    box: tuple[float, float, float, float] | None = None
    mask: np.ndarray | None = field(default=None, repr=False)

    @property
    def overlay(self) -> Image.Image:
        """The heatmap over the image (``colormap``, ``alpha``; see :func:`overlay_heatmap`), with the
        detection's box or the segment's outline drawn on it; it carries where the weights came
        from (``info["nstcam"]``), which :func:`nstcam.save_image` keeps and, for random weights,
        says below the picture."""
        out = overlay_heatmap(self.image, self.heatmap, colormap=self.colormap, alpha=self.alpha)
        if self.box is not None or self.mask is not None:
            out = mark_region(out, box=self.box, mask=self.mask)
        out.info.pop("nstcam", None)  # the photo's own tags are not this map's
        said = (self.weights.notice, self.weights.is_random) if self.weights else ("custom model", False)
        return tag_weights(out, *said)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no pixel data)."""
        random = bool(self.weights and self.weights.is_random)
        return {
            "class_index": self.class_index,
            "label": self.label,
            "score": round(self.score, 6),
            "method": self.method,
            "layer": self.layer,
            "heatmap_size": [int(self.heatmap.shape[1]), int(self.heatmap.shape[0])],
            **({"box": list(self.box)} if self.box is not None else {}),
            **({"mask_share": round(float(self.mask.mean()), 6)} if self.mask is not None else {}),
            "random_weights": random,
            "weights": self.weights.notice if self.weights else "custom model",
            **(
                {
                    "faithfulness": self.faithfulness.as_dict(),
                    "random_map": self.baseline.as_dict(),
                    **({"centre_map": self.centre.as_dict()} if self.centre is not None else {}),
                }
                if self.faithfulness is not None and self.baseline is not None
                else {}
            ),
        }


def evaluate_maps(
    model: nn.Module, x: torch.Tensor, raws: list[torch.Tensor], classes: list[int], steps: int
) -> list[tuple[Faithfulness, Faithfulness, Faithfulness]]:
    """(map's, random map's, centre blob's) metrics per class, for one image ``x`` (1, 3, H, W) and
    its raw maps (one (1, h, w) map per class), measured at the network input's size.

    The random map is drawn on the map's own grid (seed 0) and upsampled as the map is: a per-pixel
    random map deletes pixels as scattered noise, which on a real classifier removes the class as
    fast as a good map does (issue 40: it beat Grad-CAM on deletion on 4 of 6 photos); a coarse one
    removes blobs, as maps do. The centre blob (:func:`nstcam.metrics.centre_gaussian`) is the
    photographer's bias, which a useful map should beat too."""
    k, (h, w) = len(classes), x.shape[-2:]
    maps = torch.cat([upsample_maps(r, (h, w)) for r in raws])
    grid = tuple(raws[0].shape[-2:])
    xk = x.expand(k, -1, -1, -1)
    ours = faithfulness(model, xk, maps, classes, steps=steps)
    noise = upsample_maps(random_map(k, *grid, seed=0, device=x.device), (h, w))
    chance = faithfulness(model, xk, noise, classes, steps=steps)
    centre = faithfulness(model, xk, centre_gaussian(k, h, w, device=x.device), classes, steps=steps)
    return list(zip(ours, chance, centre, strict=True))
