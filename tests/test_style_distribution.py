"""Distribution-matching style losses (nstcam/style/_distribution.py, issue 27): the Gaussian W2
against its closed form in float64 (scipy's sqrtm), its gradient by gradcheck, the sliced distance
against a numpy reference for given directions, and both zero where the features are the style's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nstcam.style._distribution import (
    feature_stats,
    gaussian_w2,
    psd_sqrt,
    random_directions,
    sliced_w2,
    sorted_projections,
)

scipy_linalg = pytest.importorskip("scipy.linalg")


def _features(
    seed: int, n: int = 2, c: int = 16, h: int = 12, w: int = 10, dtype=torch.float32
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(c, c, generator=g, dtype=torch.float64)  # correlated channels, as features are
    f = torch.einsum("dc,nchw->ndhw", mix, torch.randn(n, c, h, w, generator=g, dtype=torch.float64))
    return torch.relu(f + 0.5).to(dtype)


def _w2_f64(a: np.ndarray, b: np.ndarray) -> float:
    """The closed form in float64: means and covariances over positions, scipy's sqrtm."""
    fa, fb = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    ma, mb = fa.mean(1), fb.mean(1)
    ca = (fa - ma[:, None]) @ (fa - ma[:, None]).T / fa.shape[1]
    cb = (fb - mb[:, None]) @ (fb - mb[:, None]).T / fb.shape[1]
    rb = np.real(scipy_linalg.sqrtm(cb))
    cross = np.real(scipy_linalg.sqrtm(rb @ ca @ rb))
    return float(((ma - mb) ** 2).sum() + np.trace(ca + cb - 2 * cross))


@pytest.mark.parametrize("method", ["eigh", "newton-schulz"])
def test_gaussian_w2_equals_the_closed_form_in_float64(method):
    out, style = _features(0), _features(1, n=1, h=9, w=7)
    mu, cov = feature_stats(out)
    mu_t, cov_t = feature_stats(style)
    got = gaussian_w2(mu, cov, mu_t, cov_t, psd_sqrt(cov_t.double()).float(), method=method)
    want = [_w2_f64(out[i].double().numpy(), style[0].double().numpy()) for i in range(2)]
    rel = (got.double() - torch.tensor(want)).abs() / torch.tensor(want)
    assert float(rel.max()) <= (1e-4 if method == "eigh" else 1e-3), (got, want)


def test_gaussian_w2_gradient_passes_gradcheck_in_float64():
    style = _features(1, n=1, c=6, dtype=torch.float64)
    mu_t, cov_t = feature_stats(style)
    root = psd_sqrt(cov_t)
    f = _features(2, n=1, c=6, h=5, w=5, dtype=torch.float64).requires_grad_(True)

    def loss(x: torch.Tensor) -> torch.Tensor:
        mu, cov = feature_stats(x)
        return gaussian_w2(mu, cov, mu_t, cov_t, root)

    assert torch.autograd.gradcheck(loss, (f,), eps=1e-6, atol=1e-5)


def test_both_distances_are_zero_when_the_features_are_the_styles():
    f = _features(3, n=1)
    mu, cov = feature_stats(f)
    w2 = gaussian_w2(mu, cov, mu, cov)
    assert abs(float(w2)) <= 1e-4 * float(cov.diagonal(dim1=-2, dim2=-1).sum())
    d = random_directions(16, 32, torch.Generator().manual_seed(0))
    assert float(sliced_w2(f, sorted_projections(f, d), d)) == 0.0
    other = _features(4, n=1)
    assert (
        float(sliced_w2(other, sorted_projections(f, d), d)) > 0
        and float(gaussian_w2(*feature_stats(other), mu, cov)) > 0
    )


def test_sliced_w2_equals_a_numpy_reference_for_given_directions():
    """Sizes differ (120 positions against 63): the style's quantile function is interpolated."""
    out, style = _features(5), _features(6, n=1, h=9, w=7)
    d = random_directions(16, 8, torch.Generator().manual_seed(1))
    got = sliced_w2(out, sorted_projections(style, d), d)
    dd = d.double().numpy()
    for i in range(2):
        po = np.sort(dd.T @ out[i].double().numpy().reshape(16, -1), axis=1)  # (K, 120)
        ps = np.sort(dd.T @ style[0].double().numpy().reshape(16, -1), axis=1)  # (K, 63)
        m, mt = po.shape[1], ps.shape[1]
        levels = (np.arange(m) + 0.5) / m
        own = (np.arange(mt) + 0.5) / mt
        q = np.stack([np.interp(levels, own, row) for row in ps])  # ends held, as np.interp does
        want = float(((po - q) ** 2).mean())
        assert abs(float(got[i]) - want) <= 1e-4 * want


def test_masked_stats_weigh_positions_and_directions_are_unit_and_reproducible():
    f = _features(7, n=1)
    mask = torch.zeros(1, 1, 12, 10)
    mask[..., :6, :] = 1
    mu, cov = feature_stats(f, mask)
    mu_top, cov_top = feature_stats(f[..., :6, :])
    torch.testing.assert_close(mu, mu_top)
    torch.testing.assert_close(cov, cov_top, rtol=1e-4, atol=1e-5)
    a = random_directions(16, 5, torch.Generator().manual_seed(9))
    torch.testing.assert_close(a.norm(dim=0), torch.ones(5))
    assert torch.equal(a, random_directions(16, 5, torch.Generator().manual_seed(9)))
