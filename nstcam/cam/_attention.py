"""Self-attention recomputed in plain operations, for the methods that need its probabilities
(LeGrad) or a second derivative through it (ShapleyCAM on a ViT): installed as a forward hook on a
private twin's attention modules, never on the shared model."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["math_attention", "with_math_attention"]


def math_attention(store: list[torch.Tensor] | None = None):
    """A forward hook (``with_kwargs=True``) for an ``nn.MultiheadAttention`` of self-attention
    without masks: recomputes the output from the module's input and weights with plain matmuls and
    softmax (twice differentiable, unlike the fused kernel), appends the probabilities (N, heads, T,
    T) to ``store``, and returns ``(output, None)``."""

    def hook(module: nn.MultiheadAttention, args: tuple, kwargs: dict, _output: object) -> tuple:
        query = args[0] if args else kwargs["query"]
        n, t, d = query.shape
        heads = module.num_heads
        q, k, v = F.linear(query, module.in_proj_weight, module.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (z.reshape(n, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        probs = (q @ k.transpose(-2, -1) / math.sqrt(d // heads)).softmax(dim=-1)  # (N, heads, T, T)
        if not probs.requires_grad:
            probs = probs.detach().requires_grad_()
        if store is not None:
            store.append(probs)
        out = (probs @ v).transpose(1, 2).reshape(n, t, d)
        return module.out_proj(out), None

    return hook


def with_math_attention(net: nn.Module) -> list:
    """Hooks :func:`math_attention` on every ``nn.MultiheadAttention`` of ``net`` (a private twin);
    returns the handles."""
    return [
        m.register_forward_hook(math_attention(), with_kwargs=True)
        for m in net.modules()
        if isinstance(m, nn.MultiheadAttention)
    ]
