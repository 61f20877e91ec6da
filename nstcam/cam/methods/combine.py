"""How a method's weighted activations become a map: their channel sum, or their first principal
component (``eigen_smooth``), and the map of channel weights.

Activations are channels first, (N, C, *grid): (N, C, h, w) of an image, (N, C, t, h, w) of a clip or
a volume; every formula reads the grid as ``grid_dims`` and a map keeps it, (N, *grid)."""

from __future__ import annotations

import torch

from nstcam._lapack import single_threaded

__all__ = ["cam_from_weights", "combine", "first_component", "grid_dims", "weighted"]


def grid_dims(t: torch.Tensor) -> tuple[int, ...]:
    """The grid's dimensions of a channels-first (N, C, *grid) tensor: (2, 3), or (2, 3, 4) over time."""
    return tuple(range(2, t.ndim))


def first_component(terms: torch.Tensor, sign: str = "sum") -> torch.Tensor:
    """Each image's (positions, C) ``terms`` (N, C, *grid), centred over positions, projected on
    their first right singular vector: (N, *grid). SVD's sign is arbitrary, so it is fixed by a rule:

    - ``"sum"``: the map correlates positively with the channel sum of ``terms`` (the map the
      method would give without a projection); EigenCAM's sum of activations.
    - ``"extreme"``: Seg-Eigen-CAM's (Chung & Ying 2025, eq. 13): flipped when ``|min| > |max|``.
    """
    n, c, grid = terms.shape[0], terms.shape[1], terms.shape[2:]
    flat = terms.reshape(n, c, -1).transpose(1, 2)
    flat = torch.nan_to_num(flat) - torch.nan_to_num(flat).mean(dim=1, keepdim=True)
    with single_threaded():  # MKL's LAPACK is 2-4x slower in a worker thread otherwise (nstcam/_lapack.py)
        _, _, vh = torch.linalg.svd(flat, full_matrices=False)
    proj = (flat @ vh[:, 0, :].unsqueeze(-1)).squeeze(-1)  # (N, positions)
    if sign == "extreme":
        flip = proj.amin(1, keepdim=True).abs() > proj.amax(1, keepdim=True).abs()
        s = torch.where(flip, -torch.ones_like(proj[:, :1]), torch.ones_like(proj[:, :1]))
    else:
        s = torch.sign((proj * terms.reshape(n, c, -1).sum(dim=1)).sum(dim=1, keepdim=True))
        s = torch.where(s == 0, torch.ones_like(s), s)
    return (proj * s).reshape(n, *grid)


def combine(terms: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
    """The map of weighted activations ``terms`` (N, C, *grid): their channel sum, or with
    ``eigen_smooth`` their first principal component (oriented like the sum). Before ReLU."""
    return first_component(terms) if eigen_smooth else terms.sum(dim=1)


def cam_from_weights(a: torch.Tensor, w: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
    """``ReLU(sum_c w_c A_c)`` for channel weights ``w`` of shape (N, C) (or its first principal
    component with ``eigen_smooth``)."""
    if eigen_smooth:
        return torch.relu(first_component(weighted(a, w)))
    return torch.relu(torch.einsum("nc,nc...->n...", w, a))


def weighted(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Channel weights ``w`` (N, C) applied to the activations ``a`` (N, C, *grid)."""
    return w.reshape(*w.shape, *([1] * (a.ndim - 2))) * a
