"""Class activation map formulas: activations ``A`` and gradients ``G`` of shape (N, C, h, w) in,
maps (N, h, w) out, before ReLU and normalisation unless stated.

A gradient method is written as its *terms*: the weighted activations (N, C, h, w) whose sum over
channels is the map (``w_c A_c`` for channel weights, ``ReLU(G) A`` for LayerCAM...). The map is
that sum, or with ``eigen_smooth`` the terms' first principal component (pytorch-grad-cam's
``eigen_smooth``), oriented like the sum. The catalogue of every method (family, paper, cost, which
other library has it) is :data:`METHOD_INFO`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nstcam._lapack import eigh, single_threaded

__all__ = [
    "ACTIVATION_METHODS",
    "GRADIENT_METHODS",
    "GRAPHED_METHODS",
    "METHODS",
    "METHOD_INFO",
    "PERTURBATION_METHODS",
    "MethodInfo",
    "cam_from_weights",
    "combine",
    "eigencam",
    "fem_weights",
    "first_component",
    "gradient_terms",
    "kernel_pca",
]

_EPS = 1e-7


def first_component(terms: torch.Tensor, sign: str = "sum") -> torch.Tensor:
    """Each image's (h*w, C) ``terms``, centred over positions, projected on their first right
    singular vector: (N, h, w). SVD's sign is arbitrary, so it is fixed by a rule:

    - ``"sum"``: the map correlates positively with the channel sum of ``terms`` (the map the
      method would give without a projection); EigenCAM's sum of activations.
    - ``"extreme"``: Seg-Eigen-CAM's (Chung & Ying 2025, eq. 13): flipped when ``|min| > |max|``.
    """
    n, c, h, w = terms.shape
    flat = terms.reshape(n, c, h * w).transpose(1, 2)
    flat = torch.nan_to_num(flat) - torch.nan_to_num(flat).mean(dim=1, keepdim=True)
    with single_threaded():  # MKL's LAPACK is 2-4x slower in a worker thread otherwise (nstcam/_lapack.py)
        _, _, vh = torch.linalg.svd(flat, full_matrices=False)
    proj = (flat @ vh[:, 0, :].unsqueeze(-1)).squeeze(-1)  # (N, h*w)
    if sign == "extreme":
        flip = proj.amin(1, keepdim=True).abs() > proj.amax(1, keepdim=True).abs()
        s = torch.where(flip, -torch.ones_like(proj[:, :1]), torch.ones_like(proj[:, :1]))
    else:
        s = torch.sign((proj * terms.reshape(n, c, h * w).sum(dim=1)).sum(dim=1, keepdim=True))
        s = torch.where(s == 0, torch.ones_like(s), s)
    return (proj * s).reshape(n, h, w)


def combine(terms: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
    """The map of weighted activations ``terms`` (N, C, h, w): their channel sum, or with
    ``eigen_smooth`` their first principal component (oriented like the sum). Before ReLU."""
    return first_component(terms) if eigen_smooth else terms.sum(dim=1)


def cam_from_weights(a: torch.Tensor, w: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
    """``ReLU(sum_c w_c A_c)`` for channel weights ``w`` of shape (N, C) (or its first principal
    component with ``eigen_smooth``)."""
    if eigen_smooth:
        return torch.relu(first_component(w[:, :, None, None] * a))
    return torch.relu(torch.einsum("nc,nchw->nhw", w, a))


# -- gradient methods: terms from (A, G) ---------------------------------------------------------
def _weighted(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w[:, :, None, None] * a


def gradcam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Selvaraju et al. 2017: weights are the spatial mean of the gradients."""
    return _weighted(a, g.mean(dim=(2, 3)))


def gradcam_pp_weights(a: torch.Tensor, g: torch.Tensor, g2: torch.Tensor, g3: torch.Tensor) -> torch.Tensor:
    """Grad-CAM++'s channel weights from the first, second and third powers of the gradients (the
    powers are averages over noisy inputs in Smooth Grad-CAM++): ``alpha = g2 / (2 g2 + sum_ab(A)
    g3)``, 0 where the denominator is, and weights ``sum_ij alpha_ij ReLU(g_ij)``, as the paper
    writes them. No eps is added: pytorch-grad-cam's (1e-6) outweighs the squared gradients of a
    transformer's LayerNorm'd layer (a median of about 1e-7 on random weights) and changes the map
    (``tests/test_cam_parity.py`` shows it)."""
    denom = 2 * g2 + a.sum(dim=(2, 3), keepdim=True) * g3
    ok = denom != 0
    return (torch.where(ok, g2 / torch.where(ok, denom, torch.ones_like(denom)), 0 * g2) * torch.relu(g)).sum(
        dim=(2, 3)
    )


def gradcam_pp_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Chattopadhyay et al. 2018, with the exponential-score closed form of the higher derivatives
    (``g^2`` and ``g^3`` for the second and third)."""
    return _weighted(a, gradcam_pp_weights(a, g, g.pow(2), g.pow(3)))


def xgradcam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Fu et al. 2020: weights ``sum_ij(A_ij g_ij) / (sum_ij A_ij)``."""
    return _weighted(a, (a * g).sum(dim=(2, 3)) / (a.sum(dim=(2, 3)) + _EPS))


def layercam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Jiang et al. 2021: ``ReLU(g) * A``, element-wise weights."""
    return torch.relu(g) * a


def hirescam_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Draelos & Carin 2020: ``g * A``, element-wise gradients, no averaging."""
    return g * a


def elementwise_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Grad-CAM element-wise (pytorch-grad-cam): ``ReLU(g * A)`` before the channel sum."""
    return torch.relu(g * a)


def shapley_terms(a: torch.Tensor, g: torch.Tensor, hvp: torch.Tensor) -> torch.Tensor:
    """ShapleyCAM (Cai et al. 2025): weights ``mean_ij(g - H A / 2)``, with ``H A`` the
    Hessian-vector product of the score with respect to the activation, along the activation."""
    return _weighted(a, (g - 0.5 * hvp).mean(dim=(2, 3)))


_TERMS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "gradcam": gradcam_terms,
    "gradcam++": gradcam_pp_terms,
    "xgradcam": xgradcam_terms,
    "layercam": layercam_terms,
    "hirescam": hirescam_terms,
    "gradcam-elementwise": elementwise_terms,
    "eigengradcam": hirescam_terms,  # A * G, always projected
    "segeigencam": lambda a, g: g.abs() * a,  # |G| * A, projected with Seg-Eigen-CAM's sign rule
}
_PROJECTED = {"eigengradcam": "sum", "segeigencam": "extreme"}


def gradient_terms(method: str, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The weighted activations (N, C, h, w) of a gradient method."""
    return _TERMS[method](a, g)


def gradient_map(method: str, a: torch.Tensor, g: torch.Tensor, eigen_smooth: bool = False) -> torch.Tensor:
    """A gradient method's raw map (N, h, w), after its ReLU."""
    terms = gradient_terms(method, a, g)
    if method in _PROJECTED:
        return torch.relu(first_component(terms, _PROJECTED[method]))
    return torch.relu(combine(terms, eigen_smooth))


def _graphed(method: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return lambda a, g: gradient_map(method, a, g)


GRAPHED_METHODS = ("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "gradcam-elementwise")
"""Gradient methods whose whole pass (no SVD, no random numbers) is captured in CUDA graphs."""
GRADIENT_METHODS = {m: _graphed(m) for m in (*GRAPHED_METHODS, "eigengradcam", "segeigencam")}
"""Methods of one forward and one backward pass stopped at the target layer: name -> (A, G) -> map."""


# -- activation-only methods: one forward pass, no gradient --------------------------------------
def eigencam(a: torch.Tensor) -> torch.Tensor:
    """Muhammad & Yeasin 2020, gradient-free: the activations' first principal component, oriented
    to correlate positively with the summed activations (SVD's sign is arbitrary, and would otherwise
    flip maps between libraries and devices). The same map serves every class."""
    return first_component(a)


def fem_weights(a: torch.Tensor, k: float = 2.0) -> torch.Tensor:
    """Feature Explanation Method (Fuad et al. 2020), gradient-free: channel c's weight (N, C) is the
    share of its positions above ``mean_c + k std_c`` (population std); the map is ``sum_c w_c A_c``."""
    mean = a.mean(dim=(2, 3), keepdim=True)
    std = a.std(dim=(2, 3), keepdim=True, unbiased=False)
    return (a > mean + k * std).to(a.dtype).mean(dim=(2, 3))


def kernel_pca(a: torch.Tensor, gamma: float | None = None, coef0: float = 1.0) -> torch.Tensor:
    """KPCA-CAM (Karmani et al. 2024), gradient-free: each image's (h*w, C) activations, centred over
    positions, projected on the first kernel principal component of a sigmoid kernel
    ``tanh(gamma <x, y> + coef0)`` (``gamma`` 1/C by default, as scikit-learn's ``KernelPCA``), in
    float64 on the device. Sign as scikit-learn's: the eigenvector's largest entry is positive."""
    n, c, h, w = a.shape
    flat = a.reshape(n, c, h * w).transpose(1, 2).double()
    flat = torch.nan_to_num(flat) - torch.nan_to_num(flat).mean(dim=1, keepdim=True)
    kernel = torch.tanh((gamma if gamma is not None else 1.0 / c) * flat @ flat.transpose(1, 2) + coef0)
    m = kernel.shape[1]
    ones = torch.full((m, m), 1.0 / m, dtype=kernel.dtype, device=kernel.device)
    centred = kernel - ones @ kernel - kernel @ ones + ones @ kernel @ ones
    values, vectors = eigh(centred)  # ascending; one MKL thread (nstcam/_lapack.py)
    v, lam = vectors[:, :, -1], values[:, -1].clamp(min=0)
    big = v.gather(1, v.abs().argmax(dim=1, keepdim=True))
    v = v * torch.where(big < 0, -torch.ones_like(big), torch.ones_like(big))
    return (v * lam.sqrt()[:, None]).to(a.dtype).reshape(n, h, w)


def random_weights(n: int, c: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """RandomCAM's channel weights: uniform in [-1, 1), from a seeded generator (a baseline)."""
    return torch.rand(n, c, generator=generator, device=device) * 2 - 1


# -- the catalogue -------------------------------------------------------------------------------
@dataclass(frozen=True)
class MethodInfo:
    """What a method is, for people (README's table, the app's tooltips, ``--help``).

    Attributes:
        family: ``"gradient"``, ``"gradient-free"``, ``"perturbation"`` or ``"other"``.
        summary: one line: what it computes.
        cost: what it costs, in passes.
        paper: the paper it comes from.
        libraries: the other libraries that have it (``pgc``: pytorch-grad-cam, ``torch-cam``).
    """

    family: str
    summary: str
    cost: str
    paper: str
    libraries: tuple[str, ...]


METHOD_INFO: dict[str, MethodInfo] = {
    "gradcam": MethodInfo("gradient", "channel weights: the spatial mean of the gradients",
                          "1 forward + 1 backward to the layer", "Selvaraju et al. 2017", ("pgc", "torch-cam")),
    "gradcam++": MethodInfo("gradient", "positive gradients weighted by second/third-order terms",
                            "1 forward + 1 backward to the layer", "Chattopadhyay et al. 2018", ("pgc", "torch-cam")),
    "xgradcam": MethodInfo("gradient", "gradients weighted by the normalised activations",
                           "1 forward + 1 backward to the layer", "Fu et al. 2020", ("pgc", "torch-cam")),
    "layercam": MethodInfo("gradient", "element-wise ReLU(gradient) x activation",
                           "1 forward + 1 backward to the layer", "Jiang et al. 2021", ("pgc", "torch-cam")),
    "hirescam": MethodInfo("gradient", "element-wise gradient x activation, no averaging",
                           "1 forward + 1 backward to the layer", "Draelos & Carin 2020", ("pgc",)),
    "gradcam-elementwise": MethodInfo("gradient", "sum over channels of ReLU(gradient x activation)",
                                      "1 forward + 1 backward to the layer", "pytorch-grad-cam", ("pgc",)),
    "eigengradcam": MethodInfo("gradient", "first principal component of gradient x activation",
                               "1 forward + 1 backward to the layer + an SVD", "Muhammad & Yeasin 2020", ("pgc",)),
    "segeigencam": MethodInfo("gradient", "first principal component of abs(gradient) x activation, sign-corrected",
                              "1 forward + 1 backward to the layer + an SVD", "Chung & Ying 2025", ("pgc",)),
    "shapleycam": MethodInfo("gradient", "weights mean(gradient - Hessian x activation / 2)",
                             "1 forward + a double backward to the layer", "Cai et al. 2025", ("pgc",)),
    "smoothgradcam++": MethodInfo("gradient", "Grad-CAM++ terms averaged over noisy inputs (n_samples, std)",
                                  "1 + n_samples forwards and backwards to the layer", "Omeiza et al. 2019",
                                  ("torch-cam",)),
    "finercam": MethodInfo("gradient", "Grad-CAM of the target's score against its 3 most similar classes",
                           "1 forward + 1 backward to the layer", "Zhang et al. 2025", ("pgc",)),
    "randomcam": MethodInfo("gradient-free", "uniform random channel weights (seeded): a baseline",
                            "1 forward to the layer", "pytorch-grad-cam", ("pgc",)),
    "cam": MethodInfo("gradient-free", "the classifier's linear weights (needs a pooled linear head)",
                      "1 forward", "Zhou et al. 2016", ("torch-cam",)),
    "eigencam": MethodInfo("gradient-free", "first principal component of the activations (every class)",
                           "1 forward + an SVD", "Muhammad & Yeasin 2020", ("pgc",)),
    "fem": MethodInfo("gradient-free", "channels weighted by their share of positions above mean + 2 std",
                      "1 forward", "Fuad et al. 2020", ("pgc",)),
    "kpcacam": MethodInfo("gradient-free", "first kernel principal component (sigmoid kernel) of the activations",
                          "1 forward + an eigendecomposition", "Karmani et al. 2024", ("pgc",)),
    "scorecam": MethodInfo("perturbation", "channel weights: the class probability of the input masked by it",
                           "1 + channels forwards (chunked)", "Wang et al. 2020", ("pgc", "torch-cam")),
    "sscam": MethodInfo("perturbation", "Score-CAM with noisy masks averaged (n_samples, std)",
                        "1 + channels x n_samples forwards (chunked)", "Wang et al. 2020 (SS-CAM)", ("torch-cam",)),
    "iscam": MethodInfo("perturbation", "Score-CAM with masks integrated from 0 to 1 (n_samples)",
                        "1 + channels x n_samples forwards (chunked)", "Naidu et al. 2020", ("torch-cam",)),
    "ablationcam": MethodInfo("perturbation", "channel weights: the score's drop when the channel is zeroed",
                              "1 + channels forwards (chunked)", "Desai & Ramaswamy 2020", ("pgc",)),
    "fullgrad": MethodInfo("other", "input gradient x input plus every bias gradient x bias (BatchNorm's too)",
                           "1 forward + 1 whole backward", "Srinivas & Fleuret 2019", ("pgc",)),
    "guided-backprop": MethodInfo("other", "input gradients through ReLUs that pass only positive gradients",
                                  "1 forward + 1 whole backward", "Springenberg et al. 2015", ("pgc",)),
    "guided-gradcam": MethodInfo("other", "guided backpropagation x the Grad-CAM map",
                                 "2 forwards + 2 backwards", "Selvaraju et al. 2017", ("pgc",)),
    "legrad": MethodInfo("other", "ViT: positive gradients of each block's score on its attention maps",
                         "1 forward + 1 backward to the block", "Bousselham et al. 2024", ("torch-cam",)),
}  # fmt: skip
"""Every method ``GradCAM(method=...)`` takes, with what it is."""

METHODS = tuple(METHOD_INFO)
PERTURBATION_METHODS = ("scorecam", "sscam", "iscam", "ablationcam")
"""Methods that score one forward pass per channel of the layer (chunked; a progress callback)."""
ACTIVATION_METHODS = ("randomcam", "cam", "eigencam", "fem", "kpcacam")
"""Methods of one forward pass to the layer, no gradient."""
