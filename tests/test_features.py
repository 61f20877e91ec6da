"""The feature-map viewer: one layer's activations through the hook manager, as values and a grid."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import marked, pattern
from torch import nn

from nstcam import GradCAM, build_model, count_hooks, feature_maps


def test_vgg_layer_by_human_name_stops_there_and_leaves_no_hook(st):
    img = pattern(3, 96, 64)
    later = []
    probe = st.net[10].register_forward_hook(lambda *a: later.append(1))  # the conv after relu2_1
    try:
        fm = feature_maps(st, img, "relu2_1", top=9, input_size=96)
    finally:
        probe.remove()
    assert later == [], "the forward pass must stop at the chosen layer"
    assert fm.activations.shape == (128, 32, 48) and fm.activations.dtype == np.float32
    means = fm.activations.mean(axis=(1, 2))
    assert fm.channels == [int(c) for c in np.argsort(-means, kind="stable")[:9]]
    np.testing.assert_allclose(fm.means, means[fm.channels], rtol=1e-5)
    assert fm.means == sorted(fm.means, reverse=True)
    # tiles keep the map's 32x48 aspect (96 px on the long side), never squashed into squares
    assert fm.grid.size == (3 * 96, 3 * (64 + 14)) and fm.grid.mode == "RGB"
    assert count_hooks(st.net) == 0
    assert fm.to_dict()["shape"] == [128, 32, 48]


def test_resnet_through_gradcam_and_a_plain_module():
    net = build_model("resnet18", "random").train()  # read through an eval-mode twin
    cam = GradCAM(model=net, device="cpu", input_size=64)
    img = pattern(4, 96, 64)
    a = feature_maps(cam, img, "layer3", top=4)
    assert a.activations.shape == (256, 4, 6) and len(a.channels) == 4
    assert net.training and count_hooks(net) == 0
    b = feature_maps(net.eval(), img, "layer3", top=4, input_size=64)
    np.testing.assert_allclose(a.activations, b.activations, atol=1e-5)  # same preprocessing, same values


def test_errors_name_the_argument(st):
    img = pattern(5)
    with pytest.raises(ValueError, match="unknown VGG layer 'relu9_1'"):
        feature_maps(st, img, "relu9_1")
    with pytest.raises(ValueError, match="unknown layer 'layer9'.*Closest valid names"):
        feature_maps(build_model("resnet18", "random"), img, "layer9")
    with pytest.raises(ValueError, match=r"feature maps need a grid \(\(N, C, h, w\), channels-last or ViT"):
        feature_maps(build_model("resnet18", "random"), img, "fc")
    with pytest.raises(ValueError, match="top must be at least 1"):
        feature_maps(st, img, "relu1_1", top=0)
    with pytest.raises(TypeError, match="model_or_engine must be"):
        feature_maps("vgg", img, "relu1_1")
    assert count_hooks(st.net) == 0


def test_cli_features(tmp_path):
    from PIL import Image

    from nstcam.cli import main

    src = tmp_path / "in.png"
    pattern(6, 64, 48).save(src)
    out = tmp_path / "grid.png"
    assert (
        main(
            ["features", str(src), "--layer", "relu3_1", "-o", str(out), "--weights", "random", "--top", "4"]
        )
        == 0
    )
    assert Image.open(out).size == marked((2 * 96, 2 * (72 + 14)))  # 56x42 maps: 96x72 tiles
    meta = __import__("json").loads(out.with_suffix(".json").read_text())
    assert meta["layer"] == "relu3_1" and len(meta["channels"]) == 4 and meta["random_weights"] is True
    assert (
        main(
            [
                "features",
                str(src),
                "--model",
                "resnet18",
                "--layer",
                "layer2",
                "-o",
                str(out),
                "--weights",
                "random",
            ]
        )
        == 0
    )


def test_linear_model_layer_is_refused_clearly():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 224 * 224, 4))
    with pytest.raises(ValueError, match="choose a convolutional layer"):
        feature_maps(model, pattern(7, 64, 64), "1")
    assert torch.is_grad_enabled()


def test_tiles_keep_the_aspect_of_the_map():
    from nstcam.features import tile_size

    assert tile_size(37, 56, 96) == (96, 63)  # relu3_1 of chelsea: wide, not 96x96
    assert tile_size(56, 37, 96) == (63, 96)
    assert tile_size(4, 4, 96) == (96, 96)
