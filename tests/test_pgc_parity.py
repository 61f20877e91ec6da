"""Parity with pytorch-grad-cam, run with the reshape_transform its users write by hand, on seeded
random vit_b_16 and swin_t (and resnet18 for the perturbation methods). Skipped where grad-cam is not
installed: it is no test dependency (it pulls OpenCV and scikit-learn); ``pip install grad-cam``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torchvision.models import resnet18, swin_t, vit_b_16

pgc = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402

from nstcam.cam import GradCAM  # noqa: E402

PGC = {
    "gradcam": pgc.GradCAM,
    "gradcam++": pgc.GradCAMPlusPlus,
    "xgradcam": pgc.XGradCAM,
    "layercam": pgc.LayerCAM,
    "hirescam": pgc.HiResCAM,
}


def seeded(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.Linear) and not m.weight.any():
            nn.init.normal_(m.weight, std=0.02)  # torchvision starts ViT's head at zeros
    return model.eval()


@pytest.fixture(scope="module")
def nets():
    torch.manual_seed(0)
    vit = seeded(vit_b_16(image_size=64))
    torch.manual_seed(0)
    swin = seeded(swin_t())
    return {
        "vit": (vit, "encoder.layers.encoder_layer_11.ln_1", vit_grid, 64),
        "swin": (swin, "features.7.1.norm2", lambda t: t.permute(0, 3, 1, 2), 128),
    }  # fmt: skip


def vit_grid(t: torch.Tensor) -> torch.Tensor:
    """The reshape_transform pytorch-grad-cam's users write for a 64 px ViT-B/16: 4 x 4 patches."""
    return t[:, 1:].reshape(t.shape[0], 4, 4, -1).permute(0, 3, 1, 2)


def pearson(a, b) -> float:
    return float(np.corrcoef(np.asarray(a).ravel(), np.asarray(b).ravel())[0, 1])


@pytest.mark.parametrize("method", list(PGC))
@pytest.mark.parametrize("net", ["vit", "swin"])
def test_gradient_methods_match_pytorch_grad_cam(nets, net, method):
    model, layer, reshape, side = nets[net]
    x = torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(3))
    ours = GradCAM(model=model, target_layer=layer, method=method, device="cpu").compute(x, targets=[7])
    module = dict(model.named_modules())[layer]
    theirs = PGC[method](model=model, target_layers=[module], reshape_transform=reshape)
    try:
        want = theirs(input_tensor=x, targets=[ClassifierOutputTarget(7)])
    finally:
        theirs.activations_and_grads.release()
    r = pearson(ours[0].numpy(), want[0])
    assert r >= (0.98 if method == "gradcam++" else 0.999), r


def test_ablationcam_matches_pytorch_grad_cam_on_a_relu_layer():
    """pytorch-grad-cam zeroes a channel where the layer's minimum is 0 (after a ReLU), as the paper
    does; elsewhere it uses min - 1e7, where nstcam still zeroes: compared where both zero."""
    model = seeded(resnet18())
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    ours = GradCAM(model=model, target_layer="layer4", method="ablationcam", device="cpu").compute(
        x, targets=[3]
    )
    theirs = pgc.AblationCAM(model=model, target_layers=[model.layer4])
    try:
        want = theirs(input_tensor=x, targets=[ClassifierOutputTarget(3)])
    finally:
        theirs.activations_and_grads.release()
    assert pearson(ours[0].numpy(), want[0]) >= 0.999
