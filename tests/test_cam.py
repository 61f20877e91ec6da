"""Grad-CAM engine (random weights; a tiny model for formulas checked by hand)."""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import torch
from conftest import rss_mb
from PIL import Image
from torch import nn

from nstcam import HookManager, count_hooks
from nstcam.cam import CamResult, GradCAM, candidate_layers, overlay_heatmap


class Tiny(nn.Module):
    """conv -> BN -> in-place ReLU -> conv ("feat") -> in-place ReLU -> GAP -> fc."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(inplace=True))
        self.feat = nn.Conv2d(6, 8, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(self.relu(self.feat(self.stem(x))).mean(dim=(2, 3)))


def by_hand(model: Tiny, x: torch.Tensor, cls: int, method: str) -> torch.Tensor:
    """The published formulas, computed with plain autograd on a copy without in-place ops."""
    m = Tiny()
    m.load_state_dict(model.state_dict())
    m.eval()
    m.relu.inplace = False
    a = m.feat(m.stem(x))
    logits = m.fc(torch.relu(a).mean(dim=(2, 3)))
    (g,) = torch.autograd.grad(logits[:, cls].sum(), a)
    a = a.detach()
    if method == "gradcam":
        cam = torch.relu((g.mean(dim=(2, 3))[:, :, None, None] * a).sum(1))
    elif method == "hirescam":
        cam = torch.relu((g * a).sum(1))
    elif method == "layercam":
        cam = torch.relu((torch.relu(g) * a).sum(1))
    elif method == "xgradcam":
        w = (g * a).sum(dim=(2, 3)) / (a.sum(dim=(2, 3)) + 1e-7)
        cam = torch.relu((w[:, :, None, None] * a).sum(1))
    else:  # gradcam++
        num = g**2
        den = 2 * g**2 + a.sum(dim=(2, 3), keepdim=True) * g**3  # the paper's, no eps
        alpha = torch.where(
            den != 0, num / torch.where(den != 0, den, torch.ones_like(den)), torch.zeros_like(g)
        )
        w = (alpha * torch.relu(g)).sum(dim=(2, 3))
        cam = torch.relu((w[:, :, None, None] * a).sum(1))
    return cam


@pytest.fixture(scope="module")
def r18():
    return GradCAM("resnet18", weights="random", device="cpu")


def pic(seed=0, w=96, h=64):
    rng = np.random.default_rng(seed)
    return Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8))


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "xgradcam", "layercam", "hirescam"])
def test_formulas_equal_hand_computation(method):
    model = Tiny().eval()
    x = torch.randn(2, 3, 12, 12)
    cam = GradCAM(model=model, target_layer="feat", method=method, device="cpu")
    raw = cam.compute(x, targets=3, raw=True)
    expected = by_hand(model, x, 3, method)
    torch.testing.assert_close(raw, expected, rtol=1e-4, atol=1e-6)
    maps = cam.compute(x, targets=3)
    assert maps.shape == (2, 12, 12)
    for m in maps:  # normalised to [0, 1] after upsampling
        assert m.min().item() == 0.0 and abs(m.max().item() - 1.0) < 1e-6


def test_layer_followed_by_inplace_relu_and_backward_stops_at_layer():
    model = Tiny().eval()
    x = torch.randn(1, 3, 12, 12, requires_grad=True)
    calls = []
    h = model.stem.register_forward_hook(lambda m, i, o: calls.append(o.requires_grad))
    cam = GradCAM(model=model, target_layer="feat", device="cpu")
    cam.compute(x, targets=0)
    h.remove()
    assert calls == [False], "the layers before the target built an autograd graph"
    assert x.grad is None
    assert all(p.grad is None for p in model.parameters()), "parameters' .grad were touched"
    assert count_hooks(model) == 0


def test_batch_equals_one_by_one_and_per_image_targets(r18):
    imgs = [pic(s) for s in range(3)]
    x = torch.cat([r18.preprocess(i) for i in imgs])
    batch = r18.compute(x, targets=[1, 500, 999])
    for k, t in enumerate([1, 500, 999]):
        single = r18.compute(x[k : k + 1], targets=t)
        torch.testing.assert_close(batch[k : k + 1], single, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="targets has 2 entries for a batch of 3"):
        r18.compute(x, targets=[1, 2])
    with pytest.raises(ValueError, match="target class 1000 is out of range"):
        r18.compute(x, targets=1000)


def test_explain_top_k_results(r18):
    img = pic(1, 120, 80)
    res = r18.explain(img, top_k=3)
    assert len(res) == 3 and all(isinstance(r, CamResult) for r in res)
    scores = [r.score for r in res]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1
    probs = r18.model(r18.preprocess(img)).softmax(1)[0]
    top = probs.topk(3)
    assert [r.class_index for r in res] == top.indices.tolist()
    assert np.allclose(scores, top.values.detach().numpy(), atol=1e-5)
    for r in res:
        assert r.heatmap.shape == (80, 120) and r.heatmap.dtype == np.float32
        assert r.heatmap.min() >= 0 and r.heatmap.max() <= 1
        assert r.raw.shape == (7, 11) or r.raw.ndim == 2
        assert r.label == r18.categories[r.class_index]
        d = r.to_dict()
        assert d["random_weights"] is True and "RANDOM" in d["weights"] and d["label"] == r.label
        assert r.overlay.size == (120, 80) and r.overlay.mode == "RGB"
    one = r18.explain(img, target=281)
    assert len(one) == 1 and one[0].label == "tabby"


def test_works_under_no_grad_and_inference_mode_and_restores_training(r18):
    x = r18.preprocess(pic(2))
    ref = r18.compute(x)
    with torch.no_grad():
        torch.testing.assert_close(r18.compute(x), ref)
    assert torch.is_grad_enabled()
    with torch.inference_mode():
        xi = x.clone()
        torch.testing.assert_close(r18.compute(xi), ref)
        assert not torch.is_grad_enabled()
    r18.model.train()
    r18.model.layer2.eval()
    r18.compute(x)
    assert r18.model.training and not r18.model.layer2.training and r18.model.layer3.training
    r18.model.eval()


def test_no_hook_left_after_failure_and_memory_flat(r18):
    x = r18.preprocess(pic(3))
    with pytest.raises(ValueError):
        r18.compute(x, targets=[1, 2, 3])
    assert count_hooks(r18.model) == 0
    with pytest.raises(ValueError, match="shape"):
        r18.compute(torch.zeros(1, 4, 32, 32))
    assert count_hooks(r18.model) == 0
    for _ in range(10):
        r18.compute(x)
    gc.collect()
    before = rss_mb()
    for _ in range(200):
        r18.compute(x)
    gc.collect()
    assert count_hooks(r18.model) == 0
    assert rss_mb() - before < 30


def test_scorecam_chunked_matches_unchunked():
    model = Tiny().eval()
    x = torch.randn(1, 3, 12, 12)
    a = GradCAM(model=model, target_layer="feat", method="scorecam", scorecam_batch=3, device="cpu")
    b = GradCAM(model=model, target_layer="feat", method="scorecam", scorecam_batch=64, device="cpu")
    ma, mb = a.compute(x, targets=2), b.compute(x, targets=2)
    torch.testing.assert_close(ma, mb)
    assert ma.max() == 1 and count_hooks(model) == 0


def test_bad_arguments_and_layers(r18):
    with pytest.raises(ValueError, match="method must be one of"):
        GradCAM(model=Tiny(), target_layer="feat", method="grad-cam")
    with pytest.raises(ValueError, match="Closest valid names: layer4"):
        GradCAM(model=r18.model, target_layer="layer5")
    with pytest.raises(ValueError, match="arch must be one of"):
        GradCAM("vgg99", weights="random")
    assert candidate_layers(r18.model)[:2] == ["conv1", "bn1"]
    assert "layer4" in r18.layers and "layer4.1" in r18.layers
    bad = GradCAM(model=r18.model, target_layer="fc")
    with pytest.raises(ValueError, match=r"layer .fc. outputs \(1, 1000\); CAM reads .*choose another layer"):
        bad.compute(torch.zeros(1, 3, 64, 64))


def test_overlay_colours_are_rgb_correct():
    img = Image.new("RGB", (20, 10), (0, 0, 0))
    hot = overlay_heatmap(img, np.ones((10, 20), np.float32), alpha=1.0)
    cold = overlay_heatmap(img, np.zeros((10, 20), np.float32), alpha=1.0)
    r, _, b = hot.getpixel((0, 0))
    assert r > 100 and b < 50  # jet: 1 is red
    r, _, b = cold.getpixel((0, 0))
    assert b > 100 and r < 50  # jet: 0 is blue
    half = overlay_heatmap(Image.new("RGB", (4, 4), (255, 255, 255)), np.zeros((2, 2), np.float32), alpha=0.5)
    assert half.size == (4, 4) and half.getpixel((0, 0))[0] >= 127


def test_eval_view_shares_tensors_and_leaves_the_model_alone():
    from nstcam.cam import eval_view

    model = Tiny().eval()
    assert eval_view(model) is model
    model.train()
    model.stem[1].eval()
    before = {n: m.training for n, m in model.named_modules()}
    with HookManager(model, ["feat"]):
        view = eval_view(model)
        assert count_hooks(view) == 0 and count_hooks(model) == 2
    assert not any(m.training for m in view.modules())
    assert {n: m.training for n, m in model.named_modules()} == before
    for (n, p), (_, q) in zip(model.named_parameters(), view.named_parameters(), strict=True):
        assert p is q, n
    for (n, b), (_, c) in zip(model.named_buffers(), view.named_buffers(), strict=True):
        assert b is c, n
    with torch.no_grad():
        model.feat.weight.add_(1.0)  # in-place changes are seen through the view
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(view(x), copy.deepcopy(model).eval()(x))


def test_refuses_bad_numbers_naming_the_argument(r18):
    img = pic(5)
    with pytest.raises(ValueError, match=r"top_k must be a whole number, got 2\.5"):
        r18.explain(img, top_k=2.5)
    with pytest.raises(ValueError, match=r"target must be a whole number, got 3\.7"):
        r18.explain(img, target=3.7)
    with pytest.raises(ValueError, match="top_k must be at most 1000"):
        r18.explain(img, top_k=1001)
    x = r18.preprocess(img)
    with pytest.raises(ValueError, match="targets must be a whole number"):
        r18.compute(torch.cat([x, x]), targets=[1.5, 2])
    with pytest.raises(ValueError, match="targets must hold class indices"):
        r18.compute(x, targets=torch.tensor([1.0]))
    with pytest.raises(ValueError, match="input_size must be at least 16, got 0"):
        GradCAM(model=r18.model, input_size=0)
    with pytest.raises(ValueError, match="scorecam_batch must be at least 1, got 0"):
        GradCAM(model=r18.model, scorecam_batch=0)
    with pytest.raises(ValueError, match="alpha must be <= 1"):
        GradCAM(model=r18.model, alpha=1.5)


def test_numpy_integers_are_accepted(r18):
    img = pic(5)
    assert [r.class_index for r in r18.explain(img, top_k=np.int64(2))] == [
        r.class_index for r in r18.explain(img, top_k=2)
    ]
    assert r18.explain(img, target=np.int32(281))[0].class_index == 281
    x = r18.preprocess(img)
    torch.testing.assert_close(r18.compute(x, targets=np.array([7])), r18.compute(x, targets=7))


def test_scorecam_warns_of_nothing(r18):
    """Score-CAM read the probabilities off a graph (grad mode is on past the target layer), and torch
    warned "Converting a tensor with requires_grad=True to a scalar" on every call."""
    import warnings

    cam = GradCAM(model=r18.model, target_layer="layer4", method="scorecam", device="cpu", input_size=64)
    img = Image.fromarray((np.random.default_rng(0).random((64, 80, 3)) * 255).astype(np.uint8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (r,) = cam.explain(img, top_k=1)
    assert 0 < r.score < 1 and r.heatmap.shape == (64, 80)


def test_ablationcam_is_the_relative_score_drop_per_zeroed_channel():
    """Desai & Ramaswamy 2020, computed by hand: zero channel k of "feat", weight (y - y_k) / y."""
    model = Tiny().eval()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(4))
    cls = 2
    with torch.no_grad():
        act = model.feat(model.stem(x.clone()))  # the layer's output, before the in-place ReLU after it
        y = model.fc(torch.relu(act).mean(dim=(2, 3)))[0, cls]
        weights = []
        for k in range(act.shape[1]):
            ablated = act.clone()
            ablated[:, k] = 0
            weights.append((y - model.fc(torch.relu(ablated).mean(dim=(2, 3)))[0, cls]) / y)
    want = torch.relu(torch.einsum("c,chw->hw", torch.stack(weights), act[0]))
    seen = []
    for chunk in (3, 64):
        cam = GradCAM(
            model=model, target_layer="feat", method="ablationcam", scorecam_batch=chunk, device="cpu"
        )
        got = cam.compute(x, targets=cls, raw=True, progress=lambda d, t: seen.append((d, t)))[0]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert seen[-1] == (8, 8) and len(seen) == 3 + 1  # 8 channels in chunks of 3, then one chunk
    assert count_hooks(model) == 0
