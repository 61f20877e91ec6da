"""Class activation map formulas: activations ``A`` and gradients ``G`` of shape (N, C, h, w) in,
maps (N, h, w) out, before ReLU and normalisation unless stated."""

from __future__ import annotations

import torch

__all__ = ["GRADIENT_METHODS", "METHODS", "PERTURBATION_METHODS", "cam_from_weights", "eigencam"]

_EPS = 1e-7


def cam_from_weights(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``ReLU(sum_c w_c A_c)`` for channel weights ``w`` of shape (N, C)."""
    return torch.relu(torch.einsum("nc,nchw->nhw", w, a))


def gradcam(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Selvaraju et al. 2017: weights are the spatial mean of the gradients."""
    return cam_from_weights(a, g.mean(dim=(2, 3)))


def gradcam_pp(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Chattopadhyay et al. 2018, with the exponential-score closed form of the higher derivatives:
    ``alpha = g^2 / (2 g^2 + sum_ab(A) g^3 + eps)``, weights ``sum_ij alpha_ij ReLU(g_ij)``; the eps
    (1e-7) is pytorch-grad-cam's, so that maps agree where the denominator nears 0 (LayerNorm'd
    transformer activations)."""
    g2, g3 = g.pow(2), g.pow(3)
    denom = 2 * g2 + a.sum(dim=(2, 3), keepdim=True) * g3 + _EPS  # + eps as pytorch-grad-cam does
    alpha = g2 / torch.where(denom != 0, denom, torch.ones_like(denom))
    alpha = torch.where(g != 0, alpha, torch.zeros_like(alpha))
    return cam_from_weights(a, (alpha * torch.relu(g)).sum(dim=(2, 3)))


def xgradcam(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Fu et al. 2020: weights ``sum_ij(A_ij g_ij) / (sum_ij A_ij)``."""
    w = (a * g).sum(dim=(2, 3)) / (a.sum(dim=(2, 3)) + _EPS)
    return cam_from_weights(a, w)


def layercam(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Jiang et al. 2021: ``ReLU(sum_c ReLU(g_c) * A_c)``, element-wise weights."""
    return torch.relu((torch.relu(g) * a).sum(dim=1))


def hirescam(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Draelos & Carin 2020: ``ReLU(sum_c g_c * A_c)``, element-wise gradients, no averaging."""
    return torch.relu((g * a).sum(dim=1))


def eigencam(a: torch.Tensor) -> torch.Tensor:
    """Muhammad & Yeasin 2020, gradient-free: the activations' first principal component. Each image's
    (h*w, C) activations, centred over positions, are projected on their first right singular vector;
    its sign is chosen so that the map correlates positively with the summed activations (SVD's sign
    is arbitrary, and would otherwise flip maps between libraries and devices). The same map serves
    every class."""
    n, c, h, w = a.shape
    flat = a.reshape(n, c, h * w).transpose(1, 2)
    flat = flat - flat.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(flat, full_matrices=False)
    proj = (flat @ vh[:, 0, :].unsqueeze(-1)).squeeze(-1)  # (N, h*w)
    sign = torch.sign((proj * flat.sum(dim=2)).sum(dim=1, keepdim=True))
    return (proj * torch.where(sign == 0, torch.ones_like(sign), sign)).reshape(n, h, w)


GRADIENT_METHODS = {
    "gradcam": gradcam,
    "gradcam++": gradcam_pp,
    "xgradcam": xgradcam,
    "layercam": layercam,
    "hirescam": hirescam,
}
METHODS = (*GRADIENT_METHODS, "scorecam", "eigencam", "ablationcam")
PERTURBATION_METHODS = ("scorecam", "ablationcam")
"""Methods that score one forward pass per channel of the layer (chunked; a progress callback)."""
