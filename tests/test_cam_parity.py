"""Every method nstcam shares with pytorch-grad-cam 1.5.7 or torch-cam 0.5.0, against them: seeded random
resnet18, vit_b_16 and swin_t at their default layers, a batch of two with per-image targets, Pearson
r >= 0.999 per map. Where a reference is ill-conditioned (an SVD's arbitrary sign) or departs from
its paper, the test shows it with numbers and checks both against the formula in float64.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torchvision.models import resnet18, swin_t, vit_b_16

pgc = pytest.importorskip("pytorch_grad_cam")
torchcam = pytest.importorskip("torchcam")
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget, FinerWeightedTarget  # noqa: E402
from torchcam import methods as tcm  # noqa: E402

from nstcam.cam import GradCAM  # noqa: E402

TARGETS = [3, 7]


def seeded(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.Linear) and not m.weight.any():
            nn.init.normal_(m.weight, std=0.02)  # torchvision starts ViT's head at zeros
    return model.eval()


def vit_grid(t: torch.Tensor) -> torch.Tensor:
    """The reshape_transform pytorch-grad-cam's users write for a 64 px ViT-B/16: 4 x 4 patches."""
    return t[:, 1:].reshape(t.shape[0], 4, 4, -1).permute(0, 3, 1, 2)


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    res = seeded(resnet18())
    torch.manual_seed(0)
    vit = seeded(vit_b_16(image_size=64))
    torch.manual_seed(0)
    swin = seeded(swin_t())
    return {
        "resnet18": (res, "layer4", None, 128),
        "vit": (vit, "encoder.layers.encoder_layer_11.ln_1", vit_grid, 64),
        "swin": (swin, "features.7.1.norm2", lambda t: t.permute(0, 3, 1, 2), 128),
    }  # fmt: skip


def batch(side: int) -> torch.Tensor:
    return torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(3))


def pearson(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())[0, 1])


def ours(net, method, x, targets=TARGETS, **kw):
    model, layer, _, _ = net
    call = {k: kw.pop(k) for k in ("aug_smooth", "eigen_smooth") if k in kw}
    return (
        GradCAM(model=model, target_layer=kw.pop("layer", layer), method=method, device="cpu", **kw)
        .compute(x, targets=targets, **call)
        .numpy()
    )


def theirs(net, cls, x, targets=TARGETS, layers=None, **call):
    model, layer, reshape, _ = net
    modules = dict(model.named_modules())
    cam = cls(model=model, target_layers=[modules[n] for n in (layers or [layer])], reshape_transform=reshape)
    try:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(t) for t in targets], **call), cam
    finally:
        release(cam.activations_and_grads)


def release(recorder) -> None:
    """Removes pytorch-grad-cam's hooks (its own ``release`` fails on ShapleyCAM's ViT gradients,
    which are views: ``detach_`` refuses them)."""
    for h in recorder.handles:
        h.remove()
    recorder.handles.clear()


def assert_maps_agree(a, b, bar=0.999):
    rs = [pearson(a[i], b[i]) for i in range(len(a))]
    assert min(rs) >= bar, rs


DIRECT = {  # the same definition in both: compared map by map
    "gradcam": pgc.GradCAM,
    "gradcam++": pgc.GradCAMPlusPlus,
    "xgradcam": pgc.XGradCAM,
    "layercam": pgc.LayerCAM,
    "hirescam": pgc.HiResCAM,
    "gradcam-elementwise": pgc.GradCAMElementWise,
    "segeigencam": pgc.SegEigenCAM,
    "shapleycam": pgc.ShapleyCAM,
    "fem": pgc.FEM,
    "kpcacam": pgc.KPCA_CAM,
}


@pytest.mark.parametrize("method", list(DIRECT))
@pytest.mark.parametrize("name", ["resnet18", "vit", "swin"])
def test_shared_methods_match_pytorch_grad_cam(nets, name, method):
    if method == "shapleycam" and name != "resnet18":
        pytest.skip("pytorch-grad-cam fails here: test_shapleycam_on_transformers_against_the_formula")
    net = nets[name]
    x = batch(net[3])
    want, _ = theirs(net, DIRECT[method], x)
    if method == "gradcam++" and name != "resnet18":
        pytest.skip("pytorch-grad-cam's eps changes the map here: test_gradcampp_against_its_paper")
    assert_maps_agree(ours(net, method, x), want)


def test_shapleycam_is_gradcam_where_the_score_is_linear_in_the_activation(nets):
    """On resnet18's layer4 (pooled into a linear head) the Hessian term is 0: ShapleyCAM is Grad-CAM."""
    res = nets["resnet18"]
    xr = batch(res[3])
    assert np.abs(ours(res, "shapleycam", xr) - ours(res, "gradcam", xr)).max() < 1e-5


@pytest.mark.parametrize("name", ["vit", "swin"])
def test_shapleycam_on_transformers_against_the_formula(nets, name):
    """pytorch-grad-cam 1.5.7's ShapleyCAM fails on both: on ViT the fused attention kernel has no
    second derivative, on Swin its weights (N, C) are broadcast against channels-last activations.
    nstcam's (a double backward with attention in plain operations) is checked against the formula
    in float64 with the Hessian-vector product by central differences: H A = d/dt g(A (1 + t))."""
    net = nets[name]
    model, layer, reshape, side = net
    x = batch(side)
    with pytest.raises((RuntimeError, ValueError)):
        theirs(net, pgc.ShapleyCAM, x)
    m64 = copy.deepcopy(model).double()
    module = dict(m64.named_modules())[layer]

    def grad_at(scale: float):
        box = {}

        def hook(_m, _i, out):
            out = out.detach() * scale
            out.requires_grad_()
            box["a"] = out
            return out

        h = module.register_forward_hook(hook)
        try:
            out = m64(x.double())
            out[torch.arange(2), torch.tensor(TARGETS)].sum().backward()
        finally:
            h.remove()
        return box["a"].detach() / scale, box["a"].grad

    eps = 1e-4
    a, g = grad_at(1.0)
    hvp = (grad_at(1 + eps)[1] - grad_at(1 - eps)[1]) / (2 * eps)
    a, g, hvp = (reshape(t) for t in (a, g, hvp))  # (N, C, h, w)
    w = (g - 0.5 * hvp).mean(dim=(2, 3))
    formula = torch.einsum("nc,nchw->nhw", w, a).numpy()
    assert np.abs(hvp).max() > 1e-3 * np.abs(g).max()  # the Hessian term is really there
    assert_maps_agree(ours(net, "shapleycam", x), _scaled_up(formula, side))


def _projection_f64(terms: np.ndarray) -> np.ndarray:
    """(N, C, h, w) -> the first principal component's projection per image, numpy's sign."""
    out = []
    for t in terms.astype(np.float64):
        flat = t.reshape(t.shape[0], -1).T
        flat = flat - flat.mean(0)
        _, _, vt = np.linalg.svd(flat, full_matrices=False)
        out.append((flat @ vt[0]).reshape(t.shape[1:]))
    return np.stack(out)


def _scaled_up(raw: np.ndarray, side: int) -> np.ndarray:
    t = torch.from_numpy(np.maximum(raw, 0)).float()
    from nstcam.cam._maps import upsample_maps

    return upsample_maps(t, (side, side)).numpy()


@pytest.mark.parametrize("name", ["resnet18", "vit", "swin"])
def test_eigengradcam_and_eigen_smooth_against_the_formula(nets, name):
    """pytorch-grad-cam projects with numpy's SVD sign, which is arbitrary: its map is ReLU(p) or
    ReLU(-p), whichever numpy returns. nstcam orients p to correlate with the channel sum (the
    unprojected map). Both are checked against the formula in float64, each with its own sign."""
    net = nets[name]
    x = batch(net[3])
    for method, cls, kw in (("eigengradcam", pgc.EigenGradCAM, {}),
                            ("layercam", pgc.LayerCAM, {"eigen_smooth": True})):  # fmt: skip
        want, cam = theirs(net, cls, x, **kw)
        a = cam.activations_and_grads.activations[0].numpy()
        g = cam.activations_and_grads.gradients[0].numpy()
        terms = a * g if method == "eigengradcam" else np.maximum(g, 0) * a
        p = _projection_f64(terms)
        sign = np.sign((p * terms.sum(1)).sum(axis=(1, 2)))[:, None, None]
        got = ours(net, method, x, **kw)
        flipped = 0
        for i in range(2):
            assert pearson(got[i], _scaled_up(sign[i] * p[i : i + 1], net[3])[0]) >= 0.999
            theirs_sign = 1 if pearson(want[i], _scaled_up(p[i : i + 1], net[3])[0]) >= 0.999 else -1
            assert pearson(want[i], _scaled_up(theirs_sign * p[i : i + 1], net[3])[0]) >= 0.999
            flipped += theirs_sign != sign[i]
        if flipped == 0:  # where numpy happened to pick nstcam's sign, the maps agree outright
            assert_maps_agree(got, want)


@pytest.mark.parametrize("name", ["resnet18", "vit", "swin"])
def test_gradcampp_against_its_paper(nets, name):
    """Grad-CAM++ as Chattopadhyay et al. write it, alpha = g^2 / (2 g^2 + sum(A) g^3), in float64
    from pytorch-grad-cam's own recorded activations and gradients. pytorch-grad-cam adds 1e-6 to the
    denominator: on a transformer's LayerNorm'd layer with random weights the median g^2 is about 1e-7, so
    its eps outweighs the denominator and its map departs from the formula (the printed r)."""
    net = nets[name]
    x = batch(net[3])
    want, cam = theirs(net, pgc.GradCAMPlusPlus, x)
    a = cam.activations_and_grads.activations[0].double()
    g = cam.activations_and_grads.gradients[0].double()
    denom = 2 * g.pow(2) + a.sum(dim=(2, 3), keepdim=True) * g.pow(3)
    alpha = torch.where(denom != 0, g.pow(2) / torch.where(denom != 0, denom, 1), 0)
    formula = torch.einsum("nc,nchw->nhw", (alpha * g.relu()).sum(dim=(2, 3)), a).numpy()
    got = ours(net, "gradcam++", x)
    assert_maps_agree(got, _scaled_up(formula, net[3]))
    r = [pearson(got[i], want[i]) for i in range(2)]
    g2 = float(g.pow(2).median())
    print(f"{name}: Grad-CAM++ by the paper vs pytorch-grad-cam's (eps 1e-6): r = {r}, median g^2 {g2:.2g}")


def test_ablationcam_matches_pytorch_grad_cam_on_a_relu_layer(nets):
    """pytorch-grad-cam zeroes a channel where the layer's minimum is 0 (after a ReLU), as the paper
    does; elsewhere it uses min - 1e7, where nstcam still zeroes: compared where both zero."""
    net = nets["resnet18"]
    x = batch(64)
    want, _ = theirs(net, pgc.AblationCAM, x)
    assert_maps_agree(ours(net, "ablationcam", x), want)


def test_randomcam_is_the_formula_with_its_seeded_weights(nets):
    """RandomCAM draws channel weights uniform in [-1, 1): pytorch-grad-cam from numpy's global state,
    nstcam from a generator seeded per call. Both are ReLU(sum_c w_c A_c) for their own weights."""
    net = nets["resnet18"]
    x = batch(net[3])
    np.random.seed(5)
    w_np = np.random.uniform(-1, 1, size=(2, 512))
    np.random.seed(5)
    want, cam = theirs(net, pgc.RandomCAM, x)
    a = cam.activations_and_grads.activations[0].numpy().astype(np.float64)
    assert_maps_agree(want, _scaled_up(np.einsum("nc,nchw->nhw", w_np, a), 128))
    gen = torch.Generator().manual_seed(11)
    w = (torch.rand(2, 512, generator=gen) * 2 - 1).double().numpy()
    got = ours(net, "randomcam", x, seed=11)
    assert_maps_agree(got, _scaled_up(np.einsum("nc,nchw->nhw", w, a), 128))
    assert np.abs(got - ours(net, "randomcam", x, seed=11)).max() == 0  # seeded: reproducible
    assert np.abs(got - ours(net, "randomcam", x, seed=12)).max() > 0.05


def test_finercam_matches_pytorch_grad_cam(nets):
    net = nets["resnet18"]
    model = net[0]
    x = batch(128)
    with torch.no_grad():
        logits = model(x)
    targets = []
    for i, t in enumerate(TARGETS):
        order = np.argsort(np.abs(logits[i].numpy() - logits[i, t].item()))
        targets.append(FinerWeightedTarget(t, [int(c) for c in order[1:4]], 1.0))
    cam = pgc.FinerCAM(model, [model.layer4])
    try:
        want = cam(x, targets=targets)
    finally:
        release(cam.base_cam.activations_and_grads)
    assert_maps_agree(ours(net, "finercam", x), want)


@pytest.mark.parametrize("name", ["resnet18", "vit", "swin"])
def test_fullgrad_matches_pytorch_grad_cam(nets, name):
    """Every Conv2d and BatchNorm2d bias (ViT and Swin: their patch embedding's) plus the input term."""
    net = nets[name]
    model = net[0]
    x = batch(net[3])
    cam = pgc.FullGrad(model=model, target_layers=[])
    try:
        want = cam(input_tensor=x, targets=[ClassifierOutputTarget(t) for t in TARGETS])
    finally:
        release(cam.activations_and_grads)
    model.zero_grad(set_to_none=True)
    assert_maps_agree(ours(net, "fullgrad", x), want)


def test_guided_backprop_matches_pytorch_grad_cam(nets):
    net = nets["resnet18"]
    model = net[0]
    x = batch(128)
    gb = pgc.GuidedBackpropReLUModel(copy.deepcopy(model), device="cpu")  # it swaps the model's ReLUs
    got = ours(net, "guided-backprop", x)
    got_gc = ours(net, "guided-gradcam", x)
    gradcam = ours(net, "gradcam", x)
    for i, t in enumerate(TARGETS):
        g = gb(x[i : i + 1].clone(), target_category=t)  # (H, W, 3)
        assert pearson(got[i], np.abs(g).max(axis=2)) >= 0.999
        assert pearson(got_gc[i], np.abs(g * gradcam[i][:, :, None]).max(axis=2)) >= 0.999


def test_aug_smooth_and_several_layers_match_pytorch_grad_cam(nets):
    net = nets["resnet18"]
    x = batch(128)
    want, _ = theirs(net, pgc.GradCAM, x, aug_smooth=True)
    assert_maps_agree(ours(net, "gradcam", x, aug_smooth=True), want)
    want, _ = theirs(net, pgc.GradCAM, x, layers=["layer3", "layer4"])
    assert_maps_agree(ours(net, "gradcam", x, layer=["layer3", "layer4"], fuse="mean"), want)


# -- torch-cam --------------------------------------------------------------------------------------
def _torchcam(cls, model, layer, x, targets=TARGETS, **kw):
    with cls(model, layer, **kw) as extractor:
        out = model(x)
        return extractor(class_idx=list(targets), scores=out, normalized=False)[0].detach().numpy()


def test_cam_matches_torch_cam_and_is_refused_without_a_pooled_linear_head(nets):
    """torch-cam's CAM keeps negative evidence (no ReLU, then min-max); nstcam's maps are ReLU'd like
    every CAM: compared on the positive part of torch-cam's unnormalised map."""
    model = nets["resnet18"][0]
    x = batch(128)
    want = _torchcam(tcm.CAM, model, "layer4", x, fc_layer="fc")
    got = ours(nets["resnet18"], "cam", x)
    assert_maps_agree(got, _scaled_up(np.maximum(want, 0), 128))
    with pytest.raises(ValueError, match="global average pooling.*method='gradcam'"):
        ours(nets["resnet18"], "cam", x, layer="layer3")  # layer4 stands between layer3 and the head
    with pytest.raises(ValueError, match="global average pooling.*method='gradcam'"):
        ours(nets["vit"], "cam", batch(64))  # ViT's head reads the class token, not a pooled map


class _Noise:
    """A torch-cam ``_distrib`` that hands out given noise tensors in order."""

    def __init__(self, noise):
        self.noise = list(noise)

    def sample(self, size):
        t = self.noise.pop(0)
        assert tuple(t.shape) == tuple(size)
        return t


def _torchcam_with_noise(cls, model, layer, x, noise, **kw):
    with cls(model, layer, **kw) as extractor:
        if noise is not None:
            extractor._distrib = _Noise(noise)
        out = model(x)
        return extractor(class_idx=list(TARGETS), scores=out)[0].detach().numpy()


@pytest.mark.parametrize("kind", ["sscam", "iscam"])
def test_score_cam_variants_match_torch_cam_with_the_same_noise(nets, kind):
    model = nets["resnet18"][0]
    # layer3 4 x 4: 256 channels x 3 samples x 2 images masked passes (layer4's 512 took 21 s a kind)
    x = batch(64)
    n, std = 3, 2.0
    noise = None
    if kind == "sscam":
        gen = torch.Generator().manual_seed(0)
        noise = [std * torch.randn((2, 256, 64, 64), generator=gen) for _ in range(n)]
    cls = tcm.SSCAM if kind == "sscam" else tcm.ISCAM
    extra = {"std": std} if kind == "sscam" else {}
    want = _torchcam_with_noise(cls, model, "layer3", x, noise, batch_size=256, num_samples=n, **extra)
    got = ours(nets["resnet18"], kind, x, n_samples=n, std=std, seed=0, scorecam_batch=256, layer="layer3")
    assert_maps_agree(got, _scaled_up(want, 64))


def test_smoothgradcampp_against_its_paper_and_torch_cam(nets):
    """torch-cam 0.5.0's Smooth Grad-CAM++ departs from the paper in three ways: alpha's denominator
    is sum(g^3 * A) instead of sum(A) * g^3, the weights use the *last* noisy sample's gradient
    instead of the average, and the map weights the last noisy activation instead of the clean one.
    nstcam follows the paper (Omeiza et al. 2019, eq. 8-10): checked against it in float64 with the
    same noise; torch-cam's correlation is printed. On layer3: layer4's gradient is the head's
    weights, the same for every noisy input, which would hide the smoothing."""
    net = nets["resnet18"]
    model, _, _, side = net
    x = batch(side)
    n, std = 4, 0.3
    gen = torch.Generator().manual_seed(0)
    noise = [std * torch.randn(x.shape, generator=gen) for _ in range(n)]
    from nstcam.hooks import HookManager

    def act_grad(inp, t):
        with HookManager(model, ["layer3"], capture_grads=True, clone=True) as h:
            out = model(inp)
            out[torch.arange(2), t].sum().backward()
            return h.outputs["layer3"].detach().double(), h.grads["layer3"].double()

    t = torch.tensor(TARGETS)
    a, _ = act_grad(x.clone(), t)
    gs = [act_grad(x + e, t)[1] for e in noise]
    g1, g2, g3 = (sum(g.pow(p) for g in gs) / n for p in (1, 2, 3))
    denom = 2 * g2 + a.sum(dim=(2, 3), keepdim=True) * g3
    alpha = torch.where(denom != 0, g2 / torch.where(denom != 0, denom, 1), 0)
    w = (alpha * g1.relu()).sum(dim=(2, 3))
    formula = torch.einsum("nc,nchw->nhw", w, a).numpy()
    got = ours(net, "smoothgradcam++", x, n_samples=n, std=std, seed=0, layer="layer3")
    assert (
        np.abs(got - ours(net, "smoothgradcam++", x, n_samples=n, std=std, seed=1, layer="layer3")).max()
        > 1e-3
    )
    assert_maps_agree(got, _scaled_up(formula, side))
    model.zero_grad(set_to_none=True)

    class Seq:
        def __init__(self):
            self.i = 0

        def sample(self, size):
            self.i += 1
            return noise[self.i - 1]

    with tcm.SmoothGradCAMpp(model, "layer3", num_samples=n, std=std) as extractor:
        extractor._distrib = Seq()
        model(x)
        want = extractor(class_idx=list(TARGETS))[0].detach().numpy()
    model.zero_grad(set_to_none=True)
    r = [pearson(got[i], _scaled_up(want[i : i + 1], side)[0]) for i in range(2)]
    print(f"torch-cam SmoothGradCAMpp vs the paper's formula: r = {r}")
    assert all(np.isfinite(r))


def test_legrad_matches_torch_cam_on_a_vit(nets):
    model = nets["vit"][0]
    x = batch(64)
    block = "encoder.layers.encoder_layer_11"
    with tcm.LeGrad(copy.deepcopy(model), [block]) as extractor:  # it changes attention arguments
        extractor.model(x)
        want = extractor(class_idx=list(TARGETS))[0].detach().numpy()
    got = ours(nets["vit"], "legrad", x, layer=block)
    assert_maps_agree(got, _scaled_up(want, 64))
    assert_maps_agree(ours(nets["vit"], "legrad", x), got)  # the default ln_1 is in that block


@pytest.mark.parametrize(
    ("method", "cls"), [("gradcam", tcm.GradCAM), ("xgradcam", tcm.XGradCAM), ("layercam", tcm.LayerCAM)]
)
def test_gradient_methods_match_torch_cam(nets, method, cls):
    """torch-cam hooks the layer's raw output (no reshape_transform): compared on resnet18."""
    net = nets["resnet18"]
    x = batch(128)
    model = net[0]
    with cls(model, "layer4") as extractor:
        out = model(x)
        want = extractor(class_idx=list(TARGETS), scores=out)[0].detach().numpy()
    model.zero_grad(set_to_none=True)
    assert_maps_agree(ours(net, method, x), _scaled_up(want, 128))


def test_gradcampp_of_torch_cam_never_normalises_alpha(nets):
    """torch-cam 0.5.0's Grad-CAM++ divides ``alpha[idx][mask]`` in place: a copy, so alpha stays g^2
    and its weights are sum(g^2 ReLU(g)); nstcam's (the paper's) agree with pytorch-grad-cam's. Shown
    with numbers, then nstcam checked against the formula in float64."""
    net = nets["resnet18"]
    model = net[0]
    x = batch(128)
    with tcm.GradCAMpp(model, "layer4") as extractor:
        out = model(x)
        want = extractor(class_idx=list(TARGETS), scores=out, normalized=False)[0].detach().double()
    from nstcam.hooks import HookManager

    with HookManager(model, ["layer4"], capture_grads=True, clone=True) as h:
        model(x)[torch.arange(2), torch.tensor(TARGETS)].sum().backward()
        a, g = h.outputs["layer4"].detach().double(), h.grads["layer4"].double()
    model.zero_grad(set_to_none=True)
    unnormalised = torch.einsum("nc,nchw->nhw", (g.pow(2) * g.relu()).sum(dim=(2, 3)), a)
    assert torch.allclose(want, unnormalised, rtol=1e-4, atol=1e-6)  # what torch-cam computes
    denom = 2 * g.pow(2) + a.sum(dim=(2, 3), keepdim=True) * g.pow(3)
    alpha = torch.where(g != 0, g.pow(2) / torch.where(denom != 0, denom, torch.ones_like(denom)), 0 * g)
    formula = torch.einsum("nc,nchw->nhw", (alpha * g.relu()).sum(dim=(2, 3)), a).numpy()
    got = ours(net, "gradcam++", x)
    assert_maps_agree(got, _scaled_up(formula, 128))
    r = [pearson(got[i], _scaled_up(np.maximum(want.numpy()[i : i + 1], 0), 128)[0]) for i in range(2)]
    print(f"torch-cam Grad-CAM++ (alpha never normalised) vs the paper's: r = {r}")


def test_scorecam_follows_its_paper_where_the_libraries_differ(nets):
    """Three definitions go by "Score-CAM". The paper (Wang et al. 2020, eq. 5-6) weights channel k by
    the class's softmax probability on the input masked by the channel's normalised upsampled map;
    pytorch-grad-cam softmaxes the masked *logits* over channels (and upsamples with corners
    aligned), torch-cam softmaxes the logit gains over the input. nstcam's scorecam is the paper's,
    checked against it computed by hand; the libraries' correlations are printed (its sscam and
    iscam are torch-cam's own variants, compared above)."""
    net = nets["resnet18"]
    model = net[0]
    x = batch(64)
    got = ours(net, "scorecam", x)
    from nstcam.hooks import HookManager

    with HookManager(model, ["layer4"], clone=True) as h, torch.no_grad():
        model(x)
        a = h.outputs["layer4"].detach()
    with torch.no_grad():
        up = torch.nn.functional.interpolate(a, size=(64, 64), mode="bilinear", align_corners=False)
        flat = up.flatten(2)
        lo, hi = flat.amin(2)[..., None, None], flat.amax(2)[..., None, None]
        masks = torch.where(hi > lo, (up - lo) / torch.where(hi > lo, hi - lo, 1), 0)
        weights = torch.stack(
            [model(x[i : i + 1] * masks[i, :, None]).softmax(1)[:, TARGETS[i]] for i in range(2)]
        ).double()
    formula = torch.einsum("nc,nchw->nhw", weights, a.double()).numpy()
    assert_maps_agree(got, _scaled_up(formula, 64))
    pgc_map, _ = theirs(net, pgc.ScoreCAM, x)
    tc_map = _torchcam(tcm.ScoreCAM, model, "layer4", x, batch_size=256)
    r_pgc = [pearson(got[i], pgc_map[i]) for i in range(2)]
    r_tc = [pearson(got[i], _scaled_up(np.maximum(tc_map[i : i + 1], 0), 64)[0]) for i in range(2)]
    print(f"Score-CAM, the paper's vs pytorch-grad-cam's: r = {r_pgc}; vs torch-cam's: r = {r_tc}")
