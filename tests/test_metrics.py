"""nstcam.metrics: values on a model whose answer is known, parity with pytorch-grad-cam's
confidence change, the imputation against an exact solve, seeding, chunking and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from nstcam.metrics import (
    Faithfulness,
    average_drop_increase,
    centre_gaussian,
    confidence_change,
    deletion_auc,
    faithfulness,
    insertion_auc,
    random_map,
    road,
)
from nstcam.metrics._impute import linear_impute

S = 48  # image side


class TopLeft(nn.Module):
    """Class 0 is sure when the top-left quadrant holds high-frequency energy (mean x^2); nothing
    else matters. Removing, blurring or imputing that quadrant takes the class away."""

    def forward(self, x):
        energy = x[:, :, : S // 2, : S // 2].pow(2).mean(dim=(1, 2, 3))
        return torch.stack([8 * (energy - 0.5), torch.zeros_like(energy)], 1)


def quadrant_maps(n: int, corner: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    m = torch.rand(n, S, S, generator=g) * 0.05  # a little texture so no two pixels tie
    if corner == "true":
        m[:, : S // 2, : S // 2] += 0.95
    else:
        m[:, S // 2 :, S // 2 :] += 0.95
    return m


@pytest.fixture(scope="module")
def known():
    x = torch.randn(3, 3, S, S, generator=torch.Generator().manual_seed(0))
    maps = {
        "true": quadrant_maps(3, "true"),
        "opposite": quadrant_maps(3, "opposite"),
        "random": random_map(3, S, S, seed=0),
    }
    return TopLeft(), x, maps


def test_true_map_beats_random_beats_opposite_on_every_metric(known):
    model, x, maps = known
    kw = {"steps": 8}
    results = {k: faithfulness(model, x, m, 0, **kw) for k, m in maps.items()}
    for i in range(3):
        t, r, o = (results[k][i] for k in ("true", "random", "opposite"))
        assert t.confidence_change > r.confidence_change > o.confidence_change
        assert t.deletion_auc < r.deletion_auc < o.deletion_auc  # lower is better
        assert t.insertion_auc > r.insertion_auc > o.insertion_auc
        assert t.road > r.road > o.road
    t = results["true"][0]
    assert t.score > 0.95 and abs(t.confidence_change) < 0.02  # the quadrant kept, the score kept
    assert t.road > 0.3 and results["opposite"][0].road < -0.05
    assert t.deletion_curve.shape == (9,) and t.deletion_curve[0] == pytest.approx(t.score, abs=1e-6)
    # the curve falls to nothing once the quadrant (a quarter of the pixels) is gone
    assert t.deletion_curve[3] < 0.05 and t.insertion_curve[-1] == pytest.approx(t.score, abs=1e-6)


def test_single_metrics_equal_the_combined_call(known):
    model, x, maps = known
    m = maps["random"]
    combined = faithfulness(model, x, m, [0, 1, 0], steps=6, seed=3)
    cc = confidence_change(model, x, m, [0, 1, 0])
    d, dcurve = deletion_auc(model, x, m, [0, 1, 0], steps=6, return_curve=True)
    ins = insertion_auc(model, x, m, [0, 1, 0], steps=6)
    rd, morf, lerf = road(model, x, m, [0, 1, 0], seed=3, return_curves=True)
    for i, f in enumerate(combined):
        assert f.confidence_change == pytest.approx(float(cc[i]), abs=1e-6)
        assert f.deletion_auc == pytest.approx(float(d[i]), abs=1e-6)
        assert f.insertion_auc == pytest.approx(float(ins[i]), abs=1e-6)
        assert f.road == pytest.approx(float(rd[i]), abs=1e-6)
        np.testing.assert_allclose(f.deletion_curve, dcurve[i].numpy(), atol=1e-6)
    assert morf.shape == lerf.shape == (3, 9)
    # AUC is the trapezoid on [0, 1]
    c = dcurve[0].numpy()
    assert float(d[0]) == pytest.approx(((c[1:] + c[:-1]) / 2).sum() / 6, abs=1e-6)


def test_average_drop_and_increase_by_hand(known):
    model, x, maps = known
    m = maps["random"]
    with torch.no_grad():
        before = model(x).softmax(1)[:, 0]
        after = model(x * m.unsqueeze(1)).softmax(1)[:, 0]
    drop, inc = average_drop_increase(model, x, m, 0)
    assert drop == pytest.approx(float(((before - after).clamp_min(0) / before).mean() * 100), abs=1e-4)
    assert inc == pytest.approx(float((after > before).float().mean() * 100), abs=1e-6)


def _resnet_case():
    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    return model, x, random_map(4, 64, 64, seed=5), [1, 3, 5, 7]


def test_confidence_change_equals_the_formula_on_a_resnet():
    model, x, maps, targets = _resnet_case()
    with torch.no_grad():
        want = model(x * maps.unsqueeze(1)).softmax(1) - model(x).softmax(1)
    want = want[torch.arange(4), torch.tensor(targets)]
    got = confidence_change(model, x, maps.numpy(), targets, chunk=3)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_confidence_change_equals_pytorch_grad_cams():
    pytest.importorskip("pytorch_grad_cam")  # the original, where it is installed (not a test dependency)
    from pytorch_grad_cam.metrics.cam_mult_image import CamMultImageConfidenceChange
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    model, x, maps, targets = _resnet_case()
    got = confidence_change(model, x, maps, targets)
    theirs = CamMultImageConfidenceChange()(
        x, maps.numpy(), [ClassifierOutputSoftmaxTarget(t) for t in targets], model
    )
    np.testing.assert_allclose(got.numpy(), theirs, atol=1e-4)


def test_chunking_and_seeds(known):
    model, x, maps = known
    m = maps["random"]
    a = road(model, x, m, 0, seed=1, chunk=1)
    b = road(model, x, m, 0, seed=1, chunk=64)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)  # the noise of an image is its own
    c = road(model, x, m, 0, seed=2, noise=0.5)
    assert not torch.allclose(a, c)
    torch.testing.assert_close(
        deletion_auc(model, x, m, 0, chunk=1), deletion_auc(model, x, m, 0, chunk=50), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(random_map(2, 8, 8, seed=4), random_map(2, 8, 8, seed=4))


def test_model_flags_are_left_alone_and_chunks_bound_the_batch(known):
    _, x, maps = known
    seen = []

    class Spy(TopLeft):
        def forward(self, x):
            seen.append((x.shape[0], self.training))
            return super().forward(x)

    spy = Spy().train()
    deletion_auc(spy, x, maps["true"], 0, steps=10, chunk=7)
    assert spy.training
    assert all(not training for _, training in seen)  # run through an eval-mode twin
    assert max(n for n, _ in seen[1:]) == 7 and sum(n for n, _ in seen[1:]) == 3 * 11


def test_imputation_equals_an_exact_solve():
    h = w = 12
    g = torch.Generator().manual_seed(0)
    img = torch.randn(2, 3, h, w, generator=g, dtype=torch.float64)
    removed = torch.rand(2, 1, h, w, generator=g) < 0.7
    out = linear_impute(img, removed, tol=1e-10, max_iter=500)
    weights = {(-1, 0): 1 / 6, (1, 0): 1 / 6, (0, -1): 1 / 6, (0, 1): 1 / 6}
    weights.update({(a, b): 1 / 12 for a in (-1, 1) for b in (-1, 1)})
    for b in range(2):
        a = torch.zeros(h * w, h * w, dtype=torch.float64)
        rhs = torch.zeros(h * w, 3, dtype=torch.float64)
        for i in range(h):
            for j in range(w):
                k = i * w + j
                if not removed[b, 0, i, j]:
                    a[k, k], rhs[k] = 1, img[b, :, i, j]
                    continue
                for (di, dj), wt in weights.items():
                    if 0 <= i + di < h and 0 <= j + dj < w:
                        a[k, k] += wt
                        a[k, (i + di) * w + j + dj] -= wt
        exact = torch.linalg.solve(a, rhs).T.reshape(3, h, w)
        torch.testing.assert_close(out[b], exact, atol=1e-6, rtol=0)
    kept = ~removed.expand_as(img)
    assert torch.equal(out[kept], img[kept])


def test_cascaded_imputation_is_close_to_the_converged_one():
    g = torch.Generator().manual_seed(1)
    img = torch.nn.functional.avg_pool2d(torch.randn(1, 3, 96, 96, generator=g), 5, 1, 2) * 2
    removed = torch.zeros(1, 1, 96, 96, dtype=torch.bool)
    removed[..., 10:80, 20:90] = True  # one large hole: the slow case
    exact = linear_impute(img, removed, tol=1e-9, max_iter=5000, cascade=False)
    fast = linear_impute(img, removed)
    err = (fast - exact).abs()[removed.expand_as(img)]
    assert float(err.mean()) < 0.01 * float(img.std())


def test_baselines():
    c = centre_gaussian(2, 9, 11)
    assert c.shape == (2, 9, 11) and float(c.max()) == 1.0 and float(c.min()) == 0.0
    assert c[0, 4, 5] == 1.0 and torch.equal(c[0], c[1])
    r = random_map(1, 5, 6, seed=0)
    assert 0 <= float(r.min()) and float(r.max()) <= 1


def test_bad_input_names_the_argument(known):
    model, x, maps = known
    m = maps["true"]
    with pytest.raises(ValueError, match=r"maps must have shape \(N, H, W\) = \(3, 48, 48\)"):
        deletion_auc(model, x, m[:, :10], 0)
    with pytest.raises(ValueError, match=r"maps must lie in \[0, 1\]"):
        deletion_auc(model, x, m * 3, 0)
    with pytest.raises(ValueError, match="x must be a normalised batch"):
        deletion_auc(model, x[0], m, 0)
    with pytest.raises(ValueError, match="targets has 2 entries for a batch of 3"):
        road(model, x, m, [0, 1])
    with pytest.raises(ValueError, match="target class 5 is out of range"):
        confidence_change(model, x, m, 5)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        insertion_auc(model, x, m, 0, steps=0)
    with pytest.raises(ValueError, match="percentiles must be at most 99"):
        road(model, x, m, 0, percentiles=[50, 100])
    with pytest.raises(ValueError, match="baseline must be"):
        deletion_auc(model, x, m, 0, baseline="grey")
    assert isinstance(faithfulness(model, x[:1], m[:1].numpy(), 0, steps=2)[0], Faithfulness)


class QuadNet(nn.Module):
    """A conv layer, then class 0 reads the energy of its top-left quadrant only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.scale, self.shift = 1.0, 0.0

    def forward(self, x):
        h, w = x.shape[-2:]
        e = self.conv(x).pow(2)[:, :, : h // 2, : w // 2].mean(dim=(1, 2, 3))
        return torch.stack([self.scale * (e - self.shift), torch.zeros_like(e)], 1)


def test_explain_evaluate_fills_the_metrics_and_the_map_beats_the_random_one():
    from nstcam import GradCAM
    from nstcam.cam._maps import upsample_maps

    rng = np.random.default_rng(0)
    img = (rng.random((S, S, 3)) * 255).astype(np.uint8)
    net = QuadNet().eval()
    cam = GradCAM(model=net, target_layer="conv", method="hirescam", device="cpu", input_size=S)
    x = cam.preprocess(__import__("PIL.Image").Image.fromarray(img))
    with torch.no_grad():
        e = float(net.conv(x).pow(2)[:, :, : S // 2, : S // 2].mean())
    net.scale, net.shift = 8 / e, e / 2  # class 0 at about 98 %
    (r,) = cam.explain(img, target=0, evaluate=True, evaluate_steps=8)
    f, chance = r.faithfulness, r.baseline
    assert r.heatmap[: S // 2, : S // 2].mean() > 5 * r.heatmap[S // 2 :, S // 2 :].mean()
    assert f.deletion_auc < chance.deletion_auc - 0.2
    assert f.insertion_auc > chance.insertion_auc + 0.1
    assert f.road > chance.road + 0.2
    # (confidence change is not asserted: x * map dims the quadrant where the map is below 1)
    # the same figures as the metric called on the map at the network's input
    maps = upsample_maps(torch.from_numpy(r.raw)[None], tuple(x.shape[-2:]))
    (direct,) = faithfulness(net, x, maps, 0, steps=8)
    assert direct.as_dict() == f.as_dict()
    d = r.to_dict()
    assert set(d["faithfulness"]) == {"confidence_change", "deletion_auc", "insertion_auc", "road"}
    assert d["random_map"]["road"] == round(chance.road, 6)
    assert cam.explain(img, target=0)[0].faithfulness is None  # plain explain stays plain
