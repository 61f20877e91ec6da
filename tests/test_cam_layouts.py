"""Grad-CAM on layers that are not (N, C, h, w): ViT tokens and Swin's channels-last stages, read
with no reshape code from the user (issue 21, part), and EigenCAM."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import marked
from torch import nn
from torchvision.models import swin_t, vit_b_16

from nstcam import count_hooks
from nstcam.cam import GradCAM
from nstcam.cam.methods import eigencam
from nstcam.cam.registry import GRADIENT_METHODS
from nstcam.layouts import LayoutError, detect_layout, to_nchw, token_grid

VIT_LAYER = "encoder.layers.encoder_layer_11.ln_1"  # the last block's first norm: patch tokens reach the head
SWIN_LAYER = "features.7.1.norm2"


def seeded(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights, a non-zero head (torchvision starts ViT's at zeros: every gradient would be 0)."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.weight.abs().sum() == 0:
            nn.init.normal_(m.weight, std=0.02)
    return model.eval()


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return seeded(vit_b_16(image_size=64))  # 4 x 4 patches + the class token


@pytest.fixture(scope="module")
def swin():
    torch.manual_seed(0)
    return seeded(swin_t())


def reference(model, layer, x, cls, read):
    """Grad-CAM written out by hand with a user's reshape function ``read`` (what other libraries ask for)."""
    store = {}
    module = dict(model.named_modules())[layer]

    def record(_m, _i, out):
        store["act"] = out
        out.register_hook(lambda g: store.update(grad=g))

    h = module.register_forward_hook(record)
    try:
        model(x)[:, cls].sum().backward()
    finally:
        h.remove()
    a, g = read(store["act"].detach()), read(store["grad"])
    return torch.relu(GRADIENT_METHODS["gradcam"](a, g))


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(np.corrcoef(a.flatten().numpy(), b.flatten().numpy())[0, 1])


def test_token_grids_follow_the_aspect_ratio():
    assert token_grid(197, 224, 224) == (1, 14, 14)  # ViT-B/16: the class token dropped
    assert token_grid(198, 224, 224) == (2, 14, 14)  # DeiT: class and distillation tokens
    assert token_grid(50, 112, 224) == (0, 5, 10)  # not square: read from the input's aspect
    assert token_grid(41, 64, 64) is None  # 41, 40 = 5 x 8, 39 = 3 x 13: no square grid
    assert detect_layout((1, 512, 7, 7), 224, 224) == "nchw"
    assert detect_layout((1, 7, 7, 768), 224, 224) == "nhwc"
    assert detect_layout((1, 197, 768), 224, 224) == "tokens"
    with pytest.raises(LayoutError, match="reads as .* and as .*layout='nchw' or layout='nhwc'"):
        detect_layout((1, 7, 7, 7), 224, 224)  # C == h == w: never guessed
    with pytest.raises(LayoutError, match="layout='nchw' does not fit"):
        to_nchw(torch.zeros(1, 7, 7, 768), "nchw", 224, 224)


def test_vit_tokens_without_reshape_code(vit):
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    cam = GradCAM(model=vit, target_layer=VIT_LAYER, device="cpu")
    got = cam.compute(x, targets=[3, 7], raw=True)
    assert got.shape == (2, 4, 4)

    def read(t):  # the reshape_transform users write by hand elsewhere
        return t[:, 1:].reshape(t.shape[0], 4, 4, t.shape[2]).permute(0, 3, 1, 2)

    for i, cls in enumerate([3, 7]):
        want = reference(vit, VIT_LAYER, x[i : i + 1], cls, read)[0]
        assert got[i].abs().sum() > 0 and pearson(got[i], want) >= 0.999
    assert count_hooks(vit) == 0


def test_swin_channels_last_is_read_as_such_never_transposed_silently(swin):
    x = torch.randn(1, 3, 128, 96, generator=torch.Generator().manual_seed(2))  # a 4 x 3 grid
    cam = GradCAM(model=swin, target_layer=SWIN_LAYER, device="cpu")
    got = cam.compute(x, targets=[5], raw=True)[0]
    want = reference(swin, SWIN_LAYER, x, 5, lambda t: t.permute(0, 3, 1, 2))[0]
    assert got.shape == (4, 3) and got.abs().sum() > 0 and pearson(got, want) >= 0.999
    wrong = GradCAM(model=swin, target_layer=SWIN_LAYER, device="cpu", layout="nchw")
    with pytest.raises(LayoutError, match="layout='nchw' does not fit an activation of shape"):
        wrong.compute(x)  # read as (N, C, h, w), Swin's maps were silently wrong (r about 0)
    conv = GradCAM("resnet18", weights="random", device="cpu", layout="tokens")
    with pytest.raises(LayoutError, match="layout='tokens' does not fit"):
        conv.compute(torch.randn(1, 3, 64, 64))
    with pytest.raises(ValueError, match="layout must be one of nchw, tokens, nhwc, ncthw, nthwc or None"):
        GradCAM(model=swin, target_layer=SWIN_LAYER, device="cpu", layout="chw")
    assert count_hooks(swin) == 0


def test_vit_threads_equal_sequential_and_explain_draws_the_grid(vit):
    cam = GradCAM(model=vit, target_layer=VIT_LAYER, device="cpu", input_size=64)
    xs = [torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(s)) for s in range(6)]
    alone = [cam.compute(x) for x in xs]
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(cam.compute, xs))
    for a, b in zip(alone, together, strict=True):
        assert torch.equal(a, b)
    img = (np.random.default_rng(0).random((48, 48, 3)) * 255).astype(np.uint8)
    (r,) = cam.explain(img, top_k=1)
    assert r.heatmap.shape == (48, 48) and r.raw.shape == (4, 4)
    assert count_hooks(vit) == 0


def test_eigencam_is_the_first_principal_component_for_every_class():
    cam = GradCAM("resnet18", weights="random", device="cpu", method="eigencam", input_size=64)
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    img = (x[0].sigmoid().permute(1, 2, 0) * 255).byte().numpy()
    a, b = cam.explain(img, top_k=2)
    assert np.array_equal(a.heatmap, b.heatmap) and a.class_index != b.class_index
    store = {}
    h = cam.model.layer4.register_forward_hook(lambda m, i, o: store.update(act=o.detach()))
    try:
        with torch.no_grad():
            cam.model(cam.preprocess(a.image))
    finally:
        h.remove()
    act = store["act"][0]  # (C, h, w)
    flat = act.reshape(act.shape[0], -1).T
    flat = flat - flat.mean(0)
    v = torch.linalg.svd(flat, full_matrices=False).Vh[0]
    proj = flat @ v
    proj = proj if float((proj * flat.sum(1)).sum()) >= 0 else -proj
    want = torch.relu(proj).reshape(act.shape[1:])
    assert torch.allclose(torch.from_numpy(a.raw), want, atol=1e-4)
    assert eigencam(act[None]).shape == (1, *act.shape[1:])


@pytest.mark.parametrize(
    ("arch", "layer", "raw"),
    [
        ("convnext_tiny", "features.7", (2, 3)),
        ("efficientnet_b0", "features.8", (2, 3)),
        ("mobilenet_v3_small", "features.12", (2, 3)),
        ("densenet121", "features.norm5", (2, 3)),
        ("swin_t", "features.7.1.norm2", (2, 3)),
    ],
)
def test_known_archs_by_name_at_their_default_layers(arch, layer, raw):
    cam = GradCAM(arch, weights="random", device="cpu", input_size=64)
    assert cam.target_layer == layer and layer in cam.layers
    img = (np.random.default_rng(0).random((64, 96, 3)) * 255).astype(np.uint8)
    (r,) = cam.explain(img, top_k=1)
    assert r.heatmap.shape == (64, 96) and r.raw.shape == raw and np.isfinite(r.raw).all()
    assert count_hooks(cam.model) == 0


def test_vit_by_name_takes_its_square_and_a_feature_grid():
    from nstcam import feature_maps
    from nstcam.cam.layers import layers

    cam = GradCAM("vit_b_16", weights="random", device="cpu")
    assert (cam.target_layer, cam.layout, cam.input_size) == (VIT_LAYER, "tokens", 224)
    assert layers("vit_b_16")[-1] == VIT_LAYER and len(layers("regnet_y_400mf")) == 6
    img = (np.random.default_rng(1).random((60, 90, 3)) * 255).astype(np.uint8)
    (r,) = cam.explain(img, top_k=1)
    assert r.heatmap.shape == (60, 90) and r.raw.shape == (14, 14) and r.raw.max() > 0  # the head is not 0
    fm = feature_maps(cam, img, VIT_LAYER, top=4)
    assert fm.activations.shape == (768, 14, 14)  # tokens shown as their grid
    with pytest.raises(ValueError, match="takes exactly 224 px squares: leave input_size unset"):
        GradCAM(model=cam.model, device="cpu", input_size=128)
    with pytest.raises(ValueError, match="no default target layer for a Sequential: pass target_layer="):
        GradCAM(model=nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()), device="cpu")


def test_the_app_and_the_cli_take_the_new_archs(tmp_path):
    import json

    from PIL import Image

    from nstcam.app import AppConfig, Models, cam_handler, layer_choices
    from nstcam.cli import main

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    assert "vit_b_16" in models.config.cam_archs and "vit_l_16" not in models.config.cam_archs  # CPU
    assert layer_choices("swin_t")[-1] == SWIN_LAYER
    src = tmp_path / "a.png"
    Image.fromarray((np.random.default_rng(2).random((48, 64, 3)) * 255).astype(np.uint8)).save(src)
    gallery, heat, _ = cam_handler(models, str(src), "swin_t", "", "gradcam", 2)  # "": the default
    assert len(gallery) == 2 and Image.open(heat).size == marked((64, 48))
    assert "random weights" in gallery[0][1]
    out = tmp_path / "cams"
    assert main(["cam", str(src), "-o", str(out), "--arch", "convnext_tiny", "--weights", "random",
                 "--input-size", "64"]) == 0  # fmt: skip
    meta = json.loads((out / "a_cam.json").read_text())
    assert meta["layer"] == "features.7" and meta["arch"] == "convnext_tiny"


def test_ablationcam_zeroes_a_channel_in_the_layers_own_layout():
    """Tokens: channel k is zeroed in every token (dim 2); maps read as the 4 x 4 grid. On a ViT of
    vit_b_16's layout with 64 channels and two blocks (vit_b_16's 768 channels took 29 s on the
    suite's one thread: 768 passes of its tail; the layout is the same), in three batches."""
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    small = VisionTransformer(
        image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128
    )
    vit = seeded(small.eval())
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    layer = "encoder.layers.encoder_layer_1.ln_1"  # the last block's first norm, as VIT_LAYER
    cam = GradCAM(model=vit, target_layer=layer, device="cpu", method="ablationcam", scorecam_batch=24)
    seen = []
    got = cam.compute(x, targets=[3], raw=True, progress=lambda d, t: seen.append((d, t)))
    assert got.shape == (1, 4, 4) and torch.isfinite(got).all() and got.min() >= 0 and got.max() > 0
    assert seen == [(24, 64), (48, 64), (64, 64)] and count_hooks(vit) == 0


def test_faithfulness_and_subject_masks_from_a_vit(vit):
    from nstcam.subject import subject_mask

    cam = GradCAM(model=vit, target_layer=VIT_LAYER, device="cpu")
    img = (np.random.default_rng(3).random((40, 56, 3)) * 255).astype(np.uint8)
    (r,) = cam.explain(img, top_k=1, evaluate=True, evaluate_steps=2)
    assert len(r.faithfulness.deletion_curve) == 3 and 0 <= r.faithfulness.deletion_auc <= 1
    mask = subject_mask(img, cam, mode="background", threshold=0.5)[0]
    assert mask.shape == (40, 56) and 0 <= mask.min() <= mask.max() <= 1
    assert count_hooks(vit) == 0
