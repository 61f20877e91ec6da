"""TF32 convolutions on a CPU, for the self-checks' TF32 tolerances: what an NVIDIA GPU from compute
capability 8.0 does by default (``torch.backends.cudnn.allow_tf32``): each convolution's inputs,
weights and incoming gradients rounded to a 10-bit mantissa, products accumulated in float32."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


def tf32(t: torch.Tensor) -> torch.Tensor:
    """``t`` (float32) rounded to nearest on TF32's 10-bit mantissa."""
    bits = t.detach().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, conv: nn.Conv2d):
        ctx.save_for_backward(x, w)
        ctx.conv = conv
        return F.conv2d(tf32(x), tf32(w), b, conv.stride, conv.padding, conv.dilation, conv.groups)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        c = ctx.conv
        gx = torch.nn.grad.conv2d_input(x.shape, tf32(w), tf32(g), c.stride, c.padding, c.dilation, c.groups)
        return gx, None, None, None


def tf32_convs(net: nn.Module) -> nn.Module:
    """``net`` with every Conv2d running as TF32 tensor cores would (forward and input gradient)."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            m.forward = lambda x, m=m: _Conv.apply(x, m.weight, m.bias, m)
    return net


class TF32Convs(TorchDispatchMode):
    """Inside it, every convolution's inputs, weights and incoming gradients are rounded to TF32 (a
    traced pass replayed in it: forward and backward convolutions are aten ops)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            x, w, *rest = args
            args = (tf32(x), tf32(w), *rest)
        elif func is torch.ops.aten.convolution_backward.default:
            g, x, w, *rest = args
            args = (tf32(g), tf32(x), tf32(w), *rest)
        return func(*args, **(kwargs or {}))
