"""``tr(M^1/2)`` of symmetric PSD matrices by an eigendecomposition, as one opaque operator.

The W2 loss needs the trace of a matrix square root each step, and its gradient
``V diag(1 / 2 sqrt(l)) V^T`` (0 where an eigenvalue is below 1e-12, as the clamp it replaces).
As a custom operator (``torch.library``) it is computed in the forward pass with the
eigendecomposition it already has, and a compiled step calls it as one kernel, like ``eigh``
itself. What the operator adds is how ``eigh`` runs on the CPU: :func:`nstcam._lapack.eigh`, with
one MKL thread, as fast from a worker thread as from the main one. Plain ``eigh`` took up to 10x
longer in a worker thread, which made the W2 step 1.74x the Gram step there and in a compiling
engine's owner thread (README, ``bench_style_dist.py --thread --plain-eigh``); inside a compiled
graph only an operator can choose its threads.
"""

from __future__ import annotations

import torch

from nstcam._lapack import eigh

__all__ = ["trace_sqrt"]

FLOOR = 1e-12
"""Eigenvalues below this count as 0: no square root, no gradient."""


@torch.library.custom_op("nstcam::trace_sqrt_eigh", mutates_args=())
def _trace_sqrt_eigh(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    vals, vecs = eigh(m)
    root = vals.clamp_min(FLOOR).sqrt()
    half_inv = torch.where(vals > FLOOR, 0.5 / root, torch.zeros_like(root))
    return root.sum(-1), (vecs * half_inv[..., None, :]) @ vecs.transpose(-1, -2)


@_trace_sqrt_eigh.register_fake
def _(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return m.new_empty(m.shape[:-2]), torch.empty_like(m)


def _setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(output[1])


def _backward(ctx, grad_trace: torch.Tensor, _grad_gradient: torch.Tensor | None) -> torch.Tensor:
    (gradient,) = ctx.saved_tensors
    return grad_trace[..., None, None] * gradient


_trace_sqrt_eigh.register_autograd(_backward, setup_context=_setup)


def trace_sqrt(m: torch.Tensor) -> torch.Tensor:
    """``tr(m^1/2)`` of symmetric PSD ``m`` (..., C, C), differentiable (first order)."""
    return _trace_sqrt_eigh(m)[0]
