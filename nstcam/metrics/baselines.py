"""Maps that carry no information about the image, to read every metric against."""

from __future__ import annotations

import torch

__all__ = ["centre_gaussian", "random_map"]


def random_map(n: int, height: int, width: int, *, seed: int = 0, device: torch.device | str = "cpu"):
    """(n, height, width) maps of independent uniform values in [0, 1]: the same seed, the same maps
    (drawn on the CPU, so on every device)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, height, width, generator=g).to(device)


def centre_gaussian(
    n: int, height: int, width: int, *, sigma: float = 0.25, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(n, height, width) maps of a Gaussian at the image centre, ``sigma`` a fraction of each side,
    scaled to [0, 1]: photographers' centre bias, which a useful map should beat."""
    ys = (torch.arange(height, device=device) + 0.5) / height - 0.5
    xs = (torch.arange(width, device=device) + 0.5) / width - 0.5
    g = torch.exp(-(ys[:, None] ** 2 + xs[None, :] ** 2) / (2 * sigma**2))
    g = (g - g.min()) / (g.max() - g.min()).clamp_min(1e-12)
    return g.expand(n, height, width).clone()
