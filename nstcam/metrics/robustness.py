"""Is a map stable under a tiny change of the input? Two estimates under seeded uniform noise:

- :func:`max_sensitivity` (Yeh et al. 2019, "On the (in)fidelity and sensitivity of explanations",
  captum's ``sensitivity_max``): the largest ``||map(x + d) - map(x)|| / ||map(x)||`` over
  ``samples`` draws of ``d`` uniform in ``[-radius, radius]``;
- :func:`local_lipschitz` (Alvarez-Melis and Jaakkola 2018, "On the robustness of interpretability
  methods"): the largest ``||map(x + d) - map(x)|| / ||d||`` over the same draws.

``explain(x, targets)`` returns the maps of a batch: ``cam.compute`` of a :class:`nstcam.GradCAM`,
or any function. The targets stay fixed (the original input's), so a map only changes because the
input did. Norms are Frobenius over each map (and each input), in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from nstcam._checks import finite, whole

__all__ = ["local_lipschitz", "max_sensitivity", "perturbed_maps"]

Explain = Callable[[torch.Tensor, Any], torch.Tensor]


def perturbed_maps(
    explain: Explain, x: torch.Tensor, targets: Any, radius: float, samples: int, seed: int
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The maps of ``x`` (N, n) and, per draw, (the noise's norms (N,), the maps' distances (N,))."""
    radius = finite("radius", radius, minimum=0)
    samples = whole("samples", samples, minimum=1)
    if not isinstance(x, torch.Tensor) or x.ndim < 3:
        raise ValueError(f"x must be a batch tensor (N, C, H, W) or (N, C, T, H, W), got {type(x).__name__}")
    base = explain(x, targets).detach().double().flatten(1).cpu()
    gen = torch.Generator().manual_seed(int(seed))
    draws = []
    for _ in range(samples):
        d = ((torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1) * radius).to(x.device, x.dtype)
        moved = explain(x + d, targets).detach().double().flatten(1).cpu()
        draws.append((d.double().flatten(1).norm(dim=1).cpu(), (moved - base).norm(dim=1)))
    return base, draws


def max_sensitivity(
    explain: Explain, x: torch.Tensor, targets: Any, *, radius: float = 0.02, samples: int = 10, seed: int = 0
) -> torch.Tensor:
    """(N,) the largest relative change of each map over ``samples`` noisy copies of its input
    (``radius``: the noise's bound, in the normalised input's units); 0: perfectly stable. A map
    that is zero everywhere is divided by the smallest positive float (it is as unstable as it moves)."""
    base, draws = perturbed_maps(explain, x, targets, radius, samples, seed)
    norm = base.norm(dim=1).clamp_min(torch.finfo(torch.float64).tiny)
    return torch.stack([moved / norm for _, moved in draws]).max(0).values.float()


def local_lipschitz(
    explain: Explain, x: torch.Tensor, targets: Any, *, radius: float = 0.02, samples: int = 10, seed: int = 0
) -> torch.Tensor:
    """(N,) the largest ``||map(x + d) - map(x)|| / ||d||`` over ``samples`` noisy copies of the input."""
    if finite("radius", radius, minimum=0) == 0:
        raise ValueError("radius must be > 0 for local_lipschitz (the noise's norm divides)")
    _, draws = perturbed_maps(explain, x, targets, radius, samples, seed)
    return torch.stack([moved / noise for noise, moved in draws]).max(0).values.float()
