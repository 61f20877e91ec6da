"""The methods added to the 8 first ones: threads against sequential runs, nothing left on or changed
in a shared model, refusals before any work, seeded randomness, several layers fused."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from conftest import in_threads
from torch import nn
from torchvision.models import resnet18, vit_b_16

from nstcam.cam import METHOD_INFO, METHODS, CamHooks, GradCAM
from nstcam.hooks import count_hooks

NEW = [
    "gradcam-elementwise", "eigengradcam", "segeigencam", "randomcam", "shapleycam", "smoothgradcam++",
    "finercam", "cam", "fem", "kpcacam", "sscam", "iscam", "fullgrad", "guided-backprop", "guided-gradcam",
]  # fmt: skip


@pytest.fixture(scope="module")
def res():
    torch.manual_seed(0)
    return resnet18().eval()


class Tiny(nn.Module):
    """A small CNN with a pooled linear head (cheap for the per-channel methods)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2),
                                      nn.BatchNorm2d(16), nn.ReLU())  # fmt: skip
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.features(x).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return Tiny().eval()


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    m = vit_b_16(image_size=64).eval()
    nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


def batch(side=64, seed=3):
    return torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(seed))


def snapshot(model: nn.Module):
    """What a call must leave alone: module types, training flags, ReLU in-place flags, .grad."""
    return (
        [(n, type(m).__name__, m.training, getattr(m, "inplace", None)) for n, m in model.named_modules()],
        [p.grad is None for p in model.parameters()],
        count_hooks(model),
    )


def test_every_method_is_in_the_catalogue():
    assert set(NEW) | {"legrad"} <= set(METHODS) and len(METHODS) == 24
    for info in METHOD_INFO.values():
        assert (
            info.family in ("gradient", "gradient-free", "perturbation", "other") and info.cost and info.paper
        )


@pytest.mark.parametrize("method", [*NEW, "legrad"])
def test_four_threads_equal_sequential_runs_and_leave_the_model_alone(res, vit, tiny, method):
    model, layer = (vit, "encoder.layers.encoder_layer_11") if method == "legrad" else (res, "layer4")
    if method == "shapleycam":
        model, layer = vit, "encoder.layers.encoder_layer_11.ln_1"  # a Hessian term that is not 0
    kw = {}
    if method in ("sscam", "iscam"):
        model, layer, kw = tiny, "features", {"n_samples": 2, "scorecam_batch": 16, "layout": "nchw"}
    cam = GradCAM(model=model, target_layer=layer, method=method, device="cpu", **kw)
    side = 128 if model is res else 64  # resnet18's layer4: 4 x 4
    xs = [batch(side, seed=s) for s in range(4)]
    before = snapshot(model)
    want = [cam.compute(x, targets=[1, 2]) for x in xs]
    got = in_threads(lambda i: cam.compute(xs[i], targets=[1, 2]), 4)
    for i in range(4):
        assert torch.equal(got[i], want[i]), method
        assert got[i].shape == (2, side, side) and 0 <= float(got[i].min()) and float(got[i].max()) == 1
    assert snapshot(model) == before


def test_guided_backprop_never_guides_another_threads_pass(res):
    """Guided ReLUs live in a private twin: Grad-CAM run at the same time on the same model is exact."""
    plain = GradCAM(model=res, target_layer="layer4", method="gradcam", device="cpu")
    guided = GradCAM(model=res, target_layer="layer4", method="guided-backprop", device="cpu")
    x = batch()
    want = plain.compute(x, targets=[1, 2])
    out: list[torch.Tensor] = []
    stop = threading.Event()

    def guide() -> None:
        while not stop.is_set():
            guided.compute(x, targets=[1, 2])

    t = threading.Thread(target=guide)
    t.start()
    try:
        for _ in range(10):
            out.append(plain.compute(x, targets=[1, 2]))
    finally:
        stop.set()
        t.join()
    assert all(torch.equal(o, want) for o in out)
    assert count_hooks(res) == 0 and all(type(m) is not nn.Module for m in res.modules())


def test_refused_before_any_work_with_the_reason_and_a_method_that_works(res, vit):
    class NoHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x).mean(dim=(2, 3))

    with pytest.raises(ValueError, match=r"'cam' uses the classifier's linear weights.*method='gradcam'"):
        GradCAM(model=NoHead(), target_layer="conv", method="cam", device="cpu")
    with pytest.raises(ValueError, match=r"'legrad' reads a torchvision VisionTransformer.*method='gradcam'"):
        GradCAM(model=res, target_layer="layer4", method="legrad", device="cpu")
    with pytest.raises(ValueError, match=r"guides ReLU and ReLU6 modules.*has none.*method='layercam'"):
        GradCAM(model=vit, method="guided-backprop", device="cpu")
    with pytest.raises(ValueError, match="reads the whole network, not a target layer"):
        GradCAM(model=res, target_layer=["layer3", "layer4"], method="fullgrad", device="cpu")
    with pytest.raises(ValueError, match="fuse must be one of mean, max, product"):
        GradCAM(model=res, target_layer=["layer3", "layer4"], fuse="median", device="cpu")
    with pytest.raises(ValueError, match="n_samples"):
        GradCAM(model=res, method="smoothgradcam++", n_samples=0, device="cpu")
    fg = GradCAM(model=res, target_layer="layer4", method="fullgrad", device="cpu")
    with pytest.raises(ValueError, match="eigen_smooth projects weighted activations; method 'fullgrad'"):
        fg.compute(batch(), eigen_smooth=True)
    assert count_hooks(res) == 0 and count_hooks(vit) == 0


@pytest.mark.parametrize("method", ["fullgrad", "guided-backprop", "shapleycam", "legrad", "sscam", "cam"])
def test_no_hook_is_left_after_an_exception(res, vit, method):
    """A class out of range is found after the forward pass, inside the method's hooks."""
    model = vit if method in ("legrad", "shapleycam") else res
    layer = "encoder.layers.encoder_layer_11" if method == "legrad" else None
    cam = GradCAM(model=model, method=method, device="cpu", target_layer=layer)
    with pytest.raises(ValueError, match="1000"):
        cam.compute(batch(), targets=[1, 5000])
    assert count_hooks(model) == 0


def test_seeded_methods_reproduce_and_leave_the_global_random_state_alone(res):
    x = batch(128)
    state = torch.get_rng_state()

    def run(seed):
        # layer3: layer4's gradient is the head's weights, the same for every noisy input
        cam = GradCAM(model=res, target_layer="layer3", method="smoothgradcam++", seed=seed, device="cpu")
        return cam.compute(x, raw=True)

    a, b, c = run(4), run(4), run(5)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_several_layers_fused_by_mean_max_and_product(res):
    x = batch(128)

    def single(layer):
        return GradCAM(model=res, target_layer=layer, device="cpu").compute(x, targets=[1, 2], raw=True)

    from nstcam.cam._smooth import _at

    parts = [_at(single(name).unsqueeze(0), (128, 128))[0] for name in ("layer3", "layer4")]
    for how, fused in (("mean", (parts[0] + parts[1]) / 2), ("max", torch.maximum(*parts)),
                       ("product", parts[0] * parts[1])):  # fmt: skip
        cam = GradCAM(model=res, target_layer=["layer3", "layer4"], fuse=how, device="cpu")
        assert cam.target_layer == "layer3,layer4"
        raw = cam.compute(x, targets=[1, 2], raw=True)
        assert raw.shape == (2, 128, 128) and torch.allclose(raw, fused, atol=1e-6)
    results = GradCAM(model=res, target_layer=["layer3", "layer4"], device="cpu").explain(
        np.zeros((90, 120, 3), np.uint8) + 128, top_k=2
    )
    assert [r.layer for r in results] == ["layer3,layer4"] * 2 and results[0].heatmap.shape == (90, 120)


def test_aug_smooth_and_eigen_smooth_change_the_map_and_keep_its_shape(res):
    x = batch(128)
    cam = GradCAM(model=res, target_layer="layer4", device="cpu")
    plain = cam.compute(x, targets=[1, 2])
    for kw in ({"aug_smooth": True}, {"eigen_smooth": True}, {"aug_smooth": True, "eigen_smooth": True}):
        m = cam.compute(x, targets=[1, 2], **kw)
        assert m.shape == plain.shape and float(m.max()) == 1 and not torch.equal(m, plain), kw


def test_concepts_factorise_a_layer_as_well_as_scikit_learn_and_are_labelled_by_the_head(res):
    """Deep feature factorization: NMF is non-convex and its factors are not unique (any scaling or
    order fits as well), so what is compared with scikit-learn's (pytorch-grad-cam's) is the fit:
    nstcam's relative error within 5 % of the better of two seeds at the same k. Each concept's
    label is the head's softmax on its embedding."""
    from sklearn.decomposition import NMF

    from nstcam.cam import concepts

    imgs = [np.asarray(batch(128, seed=s)[0].permute(1, 2, 0).sigmoid() * 255, np.uint8) for s in range(2)]
    cam = GradCAM(model=res, target_layer="layer4", device="cpu")
    found = concepts(cam, imgs, k=3)
    assert found.maps.shape == (2, 3, 128, 128) and found.embeddings.shape == (3, 512)
    assert found.random_weights is False  # a bare torchvision model: no weights registry entry
    rand = concepts(GradCAM("resnet18", weights="random", device="cpu"), imgs[:1], k=2)
    assert rand.random_weights is True
    assert float(found.maps.min()) >= 0 and np.allclose(found.maps.max(axis=(2, 3)), 1)
    with torch.no_grad():
        probs = res.fc(torch.from_numpy(found.embeddings)).softmax(1)
    assert [lab for lab, _ in found.labels[0]] == [cam.label(int(i)) for i in probs[0].topk(2).indices]
    from nstcam.cam._maps import hooked_pass

    v = []
    for img in imgs:
        x = cam.preprocess(__import__("PIL").Image.fromarray(img))
        v.append(hooked_pass(res, "layer4", x, lambda lg: lg.topk(1, dim=1).indices.T)[1][0].reshape(512, -1))
    v = torch.cat(v, 1).double().numpy()
    v = v - v.min(axis=1, keepdims=True)
    errors = []
    for seed in (0, 1):
        ref = NMF(n_components=3, init="random", random_state=seed, max_iter=500)
        w = ref.fit_transform(v)
        errors.append(np.linalg.norm(v - w @ ref.components_) / np.linalg.norm(v))
    assert found.error <= 1.05 * min(errors), (found.error, errors)
    print(f"NMF relative error: nstcam {found.error:.4f}, scikit-learn {errors[0]:.4f} / {errors[1]:.4f}")


def test_ablationcam_runs_only_the_layers_after_the_target_where_the_network_cuts_cleanly(
    res, vit, monkeypatch
):
    """resnet18's layer4 is followed by pooling and the head only: the ablated copies skip every layer
    before it, with the same maps as through the whole network. Inside a ViT block a residual
    connection reads a value from before ln_1: no clean cut, the whole network runs."""
    import nstcam.cam.methods.perturbation as maps
    from nstcam.cam._tail import network_tail

    assert network_tail(res, "layer4") is not None
    assert network_tail(vit, "encoder.layers.encoder_layer_11.ln_1") is None
    x = batch(64)  # layer4 at 2 x 2: the same 512 ablated copies, a quarter of the pixels (issue 74)
    fast = GradCAM(model=res, target_layer="layer4", method="ablationcam", device="cpu").compute(
        x, targets=[1, 2]
    )
    monkeypatch.setattr(maps, "checked_tail", lambda *a: None)
    whole = GradCAM(model=res, target_layer="layer4", method="ablationcam", device="cpu").compute(
        x, targets=[1, 2]
    )
    torch.testing.assert_close(fast, whole, atol=1e-5, rtol=1e-4)
    assert count_hooks(res) == 0


def test_docs_method_table_is_the_registry():
    """docs/cam-methods.md is generated from the registry: a method added there is listed here."""
    from pathlib import Path

    from nstcam.cam.registry import methods_table

    page = (Path(__file__).resolve().parent.parent / "docs" / "cam-methods.md").read_text()
    assert methods_table() in page
    assert all(f"| `{m}` |" in page for m in METHODS)


def test_one_record_says_everything_the_engine_reads_of_a_method():
    """Each record's pass kind agrees with what it is: a gradient formula, an activation map, or a
    pass of its own; the lists the app and the target path read are derived from the records."""
    from nstcam.cam.registry import GRAPHED_METHODS, REGISTRY, TARGET_METHODS

    for name, m in REGISTRY.items():
        assert m.name == name and callable(m.run)
        assert not (m.formula is not None and m.activation is not None)
        assert (m.targets == "one-pass") == (m.formula is not None or m.activation is not None)
        assert m.targets in (None, "one-pass", "perturbation", "scored")
        assert (m.targets == "perturbation") == (m.family == "perturbation") == (m.target_weights is not None)
    assert set(GRAPHED_METHODS) <= {n for n, m in REGISTRY.items() if m.formula is not None}
    assert set(TARGET_METHODS) == {n for n, m in REGISTRY.items() if m.targets is not None}
    no_eigen = {n for n, m in REGISTRY.items() if not m.eigen}
    assert no_eigen == {"fullgrad", "guided-backprop", "guided-gradcam", "legrad"}


def test_a_new_gradient_method_is_one_function_and_one_record(res, monkeypatch):
    """docs/architecture.md's claim: a terms function and its record make a method the engine runs
    (its checks, its pass, its CUDA-graph key) and the app's menu offers."""
    from nstcam.app.tools import method_choices
    from nstcam.cam.methods.gradient import Formula
    from nstcam.cam.registry import REGISTRY, Method, _gradient

    def squared_terms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:  # the one function
        return g.pow(2).mean(dim=(2, 3))[:, :, None, None] * a

    record = _gradient("sq-gradcam", Formula(squared_terms), "weights mean(g^2)", "a test", ())
    assert isinstance(record, Method) and record.targets == "one-pass" and record.graphed
    monkeypatch.setitem(REGISTRY, "sq-gradcam", record)  # the one record
    x = batch(64)
    cam = GradCAM(model=res, target_layer="layer4", method="sq-gradcam", device="cpu")
    got = cam.compute(x, targets=[1, 2], raw=True)
    with CamHooks(res, "layer4") as hooks:
        logits = res(x)
        a = hooks.checked_activation(logits).detach()
        torch.autograd.grad(logits.gather(1, torch.tensor([[1], [2]])).sum(), hooks.activation)
        want = torch.relu((squared_terms(a, hooks.gradient)).sum(1))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    assert ("Gradient · sq-gradcam", "sq-gradcam") in method_choices()
