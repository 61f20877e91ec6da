"""Style transfer engine (random weights, 64 px, few steps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _numeric import bound
from conftest import RANDOM_STYLE_WEIGHT, pattern
from PIL import Image

from nstcam import count_hooks
from nstcam.color import rgb_to_yuv
from nstcam.image import image_to_tensor, normalize
from nstcam.style import (
    VGG_LAYERS,
    Cancelled,
    InsufficientMemoryError,
    StyleTransfer,
    VGGFeatureHooks,
    fold_batchnorm,
)
from nstcam.style.losses.gram import gram


@pytest.fixture(scope="module")
def content():
    return pattern(1)


@pytest.fixture(scope="module")
def style():
    return pattern(2, 64, 64)


def no_hooks(st: StyleTransfer) -> bool:
    return count_hooks(st.net) == 0 and count_hooks(st.model) == 0


def test_style_loss_falls_and_steps_count_evaluations(st, content, style):
    for optimizer, steps in (("lbfgs", 25), ("adam", 12)):
        img = st.stylize(content, style, size=64, steps=steps, optimizer=optimizer, seed=0)
        meta = img.info["nstcam"]
        hist = meta["history"]
        assert len(hist) == steps, "steps must count forward+backward evaluations"
        assert img.size == (64, 48)
        assert meta["random_weights"] is True and "RANDOM weights" in meta["weights"]
    img = st.stylize(content, style, size=64, steps=40, seed=0, style_weight=RANDOM_STYLE_WEIGHT)
    hist = img.info["nstcam"]["history"]
    bound("L-BFGS, 40 steps: first / last style term", hist[0]["style"] / hist[-1]["style"], ">", 8)
    assert hist[-1]["total"] < hist[0]["total"]
    assert no_hooks(st)


def test_parameters_never_get_gradients_and_model_untouched(st, content, style):
    st.model.train()
    st.stylize(content, style, size=32, steps=3)
    assert all(p.grad is None for p in st.net.parameters())
    assert all(p.grad is None for p in st.model.parameters())
    assert not any(m.training for m in st.net.modules())
    assert st.model.training  # the caller's mode is left alone
    st.model.eval()


def test_forward_stops_at_deepest_layer(st, content, style):
    calls = [0] * len(st.net)
    handles = [
        m.register_forward_hook(lambda m, i, o, k=k: calls.__setitem__(k, calls[k] + 1))
        for k, m in enumerate(st.net)
    ]
    try:
        st.stylize(
            content, style, size=32, steps=2, style_layers=["relu1_1", "relu2_1"], content_layers=["relu2_2"]
        )
    finally:
        for h in handles:
            h.remove()
    deepest = VGG_LAYERS["relu2_2"]
    assert calls[deepest] > 0
    assert sum(calls[deepest + 1 :]) == 0, "modules after relu2_2 ran"
    calls = [0] * len(st.net)
    handles = [
        m.register_forward_hook(lambda m, i, o, k=k: calls.__setitem__(k, calls[k] + 1))
        for k, m in enumerate(st.net)
    ]
    try:
        st.stylize(content, style, size=32, steps=2)  # defaults: deepest is relu5_1 = 36
    finally:
        for h in handles:
            h.remove()
    assert calls[36] > 0 and sum(calls[37:]) == 0
    assert no_hooks(st)


def test_no_hook_left_after_exception_and_cancellation(st, content, style):
    def boom(info):
        raise KeyError("callback failed")

    with pytest.raises(KeyError):
        st.stylize(content, style, size=32, steps=5, progress=boom)
    assert no_hooks(st)

    seen = []

    def cancel_at_3(info):
        seen.append(info.step)
        return info.step < 3

    with pytest.raises(Cancelled) as ei:
        st.stylize(content, style, size=32, steps=10, progress=cancel_at_3)
    assert seen == [1, 2, 3]
    assert len(ei.value.history) == 3 and ei.value.image.size == (32, 24)
    assert no_hooks(st)


def test_progress_reports_losses_and_previews(st, content, style):
    infos = []
    st.stylize(content, style, size=32, steps=6, progress=infos.append, preview_every=3)
    assert [i.step for i in infos] == list(range(1, 7))
    assert all(i.total_steps == 6 and set(i.losses) == {"total", "content", "style", "tv"} for i in infos)
    previews = [i.step for i in infos if i.preview is not None]
    assert previews == [3, 6] and infos[2].preview.size == (32, 24)


def test_same_seed_same_image(st, content, style):
    kw = dict(size=48, steps=5, init="noise")
    a = np.asarray(st.stylize(content, style, seed=3, **kw))
    b = np.asarray(st.stylize(content, style, seed=3, **kw))
    c = np.asarray(st.stylize(content, style, seed=4, **kw))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a.astype(int) - c).mean() > 1
    img = st.stylize(content, style, size=32, steps=2, init="noise")
    assert isinstance(img.info["nstcam"]["params"]["seed"], int)  # a random seed is recorded


def test_blend_weights_one_zero_equal_single_style(st, content, style):
    other = pattern(7, 40, 40)
    single = np.asarray(st.stylize(content, style, size=48, steps=6, seed=0))
    blend = np.asarray(st.stylize(content, [style, other], style_weights=[1, 0], size=48, steps=6, seed=0))
    np.testing.assert_array_equal(single, blend)
    mixed = np.asarray(st.stylize(content, [style, other], style_weights=[0.5, 0.5], size=48, steps=6))
    assert np.abs(mixed.astype(int) - single).mean() > 0.5
    with pytest.raises(ValueError, match="style_weights has 1 values for 2 style images"):
        st.stylize(content, [style, other], style_weights=[1], size=32, steps=1)


def test_histogram_colour_preservation_keeps_the_content_channel_means(st):
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:64, 0:64] / 64
    grey_blue = np.stack([0.45 + 0.1 * xx, 0.5 + 0.1 * yy, 0.65 + 0.05 * xx], -1) + rng.normal(
        0, 0.05, (64, 64, 3)
    )
    content = Image.fromarray((grey_blue.clip(0, 1) * 255).astype(np.uint8))
    hot = np.stack(
        [0.85 + 0.1 * np.sin(xx * 20), 0.3 + 0.2 * np.sin(yy * 15), 0.1 + 0.05 * rng.random((64, 64))], -1
    )
    style = Image.fromarray((hot.clip(0, 1) * 255).astype(np.uint8))
    want = image_to_tensor(content).mean((0, 2, 3))
    kw = dict(size=64, steps=20, seed=0, style_weight=RANDOM_STYLE_WEIGHT)
    kept = image_to_tensor(st.stylize(content, style, preserve_color="histogram", **kw))
    free = image_to_tensor(st.stylize(content, style, preserve_color=False, **kw))
    bound("kept: channel means off by", (kept.mean((0, 2, 3)) - want).abs().max(), "<", 0.05)
    # plain transfer takes the style's colours
    bound("free: channel means off by", (free.mean((0, 2, 3)) - want).abs().max(), ">", 0.15)
    bound("kept: mean change (style transferred)", (kept - image_to_tensor(content)).abs().mean(), ">", 0.02)
    with pytest.raises(ValueError, match="preserve_color must be 'luminance', 'histogram' or False"):
        st.stylize(content, style, preserve_color="hsv", size=32, steps=1)


def test_match_color_gives_the_target_mean_and_covariance():
    from nstcam.color import color_stats, match_color

    g = torch.Generator().manual_seed(0)
    source = 0.3 + 0.1 * torch.rand(1, 3, 40, 50, generator=g)
    source[:, 0] += 0.2 * source[:, 1]  # correlated channels
    target = 0.5 + 0.15 * torch.randn(1, 3, 30, 30, generator=g).clamp(-2, 2) * torch.tensor(
        [1, 0.5, 0.8]
    ).view(1, 3, 1, 1)
    out = match_color(source, target)
    (mu_o, cov_o), (mu_t, cov_t) = color_stats(out), color_stats(target)
    torch.testing.assert_close(mu_o, mu_t, atol=1e-4, rtol=0)
    torch.testing.assert_close(cov_o, cov_t, atol=1e-4, rtol=0)


def test_preserve_color_keeps_content_chroma(st, content, style):
    colourful_style = Image.fromarray(
        np.dstack(
            [np.full((64, 64), 250), np.zeros((64, 64)), np.asarray(pattern(3, 64, 64))[..., 2]]
        ).astype(np.uint8)
    )
    c = image_to_tensor(content)
    chroma = rgb_to_yuv(c)[:, 1:]
    kept = image_to_tensor(st.stylize(content, colourful_style, size=64, steps=15, preserve_color=True))
    free = image_to_tensor(st.stylize(content, colourful_style, size=64, steps=15))
    d_kept = (rgb_to_yuv(kept)[:, 1:] - chroma).abs().mean().item()
    d_free = (rgb_to_yuv(free)[:, 1:] - chroma).abs().mean().item()
    bound("chroma change, colour kept", d_kept, "<", 0.01)
    bound("chroma change, free / kept", d_free / d_kept, ">", 3)
    # the luminance did change: style was transferred
    assert (rgb_to_yuv(kept)[:, :1] - rgb_to_yuv(c)[:, :1]).abs().mean() > 0.01


def test_multiscale_coarse_to_fine(st, content, style):
    img = st.stylize(content, style, scales=[32, 64], steps=[4, 3], size=64)
    hist = img.info["nstcam"]["history"]
    assert [h["scale"] for h in hist] == [0] * 4 + [1] * 3
    assert img.size == (64, 48)
    assert img.info["nstcam"]["params"]["scales"] == [32, 64]
    from nstcam.style._plan import auto_scales as _auto_scales

    assert _auto_scales(200) == [200] and _auto_scales(512) == [256, 512]
    assert _auto_scales(2048) == [256, 512, 1024, 2048]


def test_bn_folding_keeps_features(st):
    torch.manual_seed(0)
    features = st.model.features
    saved = {k: v.clone() for k, v in features.state_dict().items()}
    try:
        for m in features.modules():  # give BatchNorm non-trivial statistics
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
        features.eval()
        folded = fold_batchnorm(features)
        assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in folded) == 0
        x = normalize(torch.rand(1, 3, 64, 64))
        names = list(VGG_LAYERS)
        with torch.no_grad(), VGGFeatureHooks(features, names) as a, VGGFeatureHooks(folded, names) as b:
            fa, fb = a.features(x), b.features(x)
        for n in names:
            err = (fa[n] - fb[n]).abs().max().item()
            assert err < 1e-4, (n, err)
        assert count_hooks(features) == 0 and count_hooks(folded) == 0
    finally:
        features.load_state_dict(saved)


def test_gram_is_size_independent():
    f = torch.rand(1, 8, 5, 7)
    tiled = f.repeat(1, 1, 3, 2)
    torch.testing.assert_close(gram(f), gram(tiled))


def test_batch_reuses_style_targets_and_survives_bad_file(st, style, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    pattern(1).save(src / "a.png")
    pattern(4).save(src / "b.jpg")
    (src / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    out = tmp_path / "out"
    before = st.style_target_computations
    res = st.stylize_batch(src, style, out, size=32, steps=2, seed=1, progress_bar=False)
    assert st.style_target_computations - before == 1, "style targets must be computed once per batch"
    assert sorted(p.name for p in res) == ["a_stylized.png", "b_stylized.png"]
    broken = str(src / "broken.png")
    assert list(res.failed) == [broken] and "not an image" in res.failed[broken]
    meta = json.loads((out / "a_stylized.json").read_text())
    assert meta["params"]["steps"] == [2] and meta["params"]["seed"] == 1 and meta["random_weights"]
    assert meta["input"] == str(src / "a.png")
    mtime = (out / "a_stylized.png").stat().st_mtime_ns
    again = st.stylize_batch(str(src / "*.png"), style, out, size=32, steps=2, progress_bar=False)
    assert again.skipped == [out / "a_stylized.png"] and again.written == []
    assert (out / "a_stylized.png").stat().st_mtime_ns == mtime
    redo = st.stylize_batch([src / "a.png"], style, out, size=32, steps=2, overwrite=True, progress_bar=False)
    assert redo.written == [out / "a_stylized.png"]
    assert no_hooks(st)


def test_memory_estimate_refuses_or_reduces(st, content, style, monkeypatch):
    small = st.estimate_memory(64, 64)
    big = st.estimate_memory(128, 128)
    assert 3.0 < (big - st.estimate_memory(1, 1)) / (small - st.estimate_memory(1, 1)) < 5.0
    import nstcam.style._memory as S

    monkeypatch.setattr(S, "available_memory", lambda device: int(st.estimate_memory(40, 30) / 0.9) + 1)
    with pytest.raises(InsufficientMemoryError, match=r"64 px needs about .* GiB .* use size=\d+ or less"):
        st.stylize(content, style, size=64, steps=1)
    img = st.stylize(content, style, size=64, steps=1, on_memory="reduce")
    assert max(img.size) < 64 and max(img.size) >= 32


def test_bad_parameters(st, content, style):
    with pytest.raises(ValueError, match="optimizer must be one of"):
        st.stylize(content, style, optimizer="sgd")
    with pytest.raises(ValueError, match="unknown VGG layer 'relu9_1'"):
        st.stylize(content, style, style_layers=["relu9_1"])
    with pytest.raises(ValueError, match="size must be"):
        st.stylize(content, style, size=4)
    with pytest.raises(ValueError, match="steps must be"):
        st.stylize(content, style, steps=0)
    with pytest.raises(TypeError, match="vgg16_bn"):
        StyleTransfer(model=torch.nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"style_weights": [float("nan")]}, "style_weights must be a finite number"),
        ({"style_weights": [float("inf")]}, "style_weights must be a finite number"),
        ({"style_layers": {"relu1_1": float("nan")}}, r"style_layers\['relu1_1'\] must be a finite number"),
        ({"steps": 2.5}, r"steps must be a whole number, got 2\.5"),
        ({"steps": [2, 2.5], "scales": [32, 64]}, "steps must be a whole number"),
        ({"size": 64.5}, "size must be a whole number"),
        ({"seed": 1.5}, "seed must be a whole number"),
        ({"lr": float("nan")}, "lr must be a finite number"),
        ({"style_weight": float("inf")}, "style_weight must be a finite number"),
        ({"preview_every": -1}, "preview_every must be at least 0"),
    ],
)
def test_refuses_bad_numbers_naming_the_argument(st, content, style, kwargs, match):
    with pytest.raises(ValueError, match=match):
        st.stylize(content, style, **{"size": 32, "steps": 1, **kwargs})


def test_numpy_integers_are_whole_numbers(st, content, style):
    img = st.stylize(content, style, size=np.int64(32), steps=np.int32(2), seed=np.int64(3))
    assert img.size == (32, 24) and len(img.info["nstcam"]["history"]) == 2
    assert img.info["nstcam"]["params"]["seed"] == 3


def test_batch_of_a_missing_folder_raises(st, style, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing_dir does not exist"):
        st.stylize_batch(tmp_path / "missing_dir", style, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="missing_dir does not exist"):
        st.stylize_batch(str(tmp_path / "missing_dir") + "/", style, tmp_path / "out")


def test_batched_steps_equal_one_at_a_time(st, style, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    pattern(11).save(src / "a.png")
    pattern(12).save(src / "b.png")
    pattern(13, 48, 64).save(src / "c.png")  # another size: a group of its own
    (src / "d.png").write_bytes(b"broken")
    kw = dict(size=64, steps=4, optimizer="adam", seed=0, progress_bar=False)
    together = st.stylize_batch(src, style, tmp_path / "batched", batch_size=3, **kw)
    alone = st.stylize_batch(src, style, tmp_path / "alone", batch_size=1, **kw)
    assert sorted(p.name for p in together.written) == sorted(p.name for p in alone.written)
    assert list(together.failed) == list(alone.failed) == [str(src / "d.png")]
    for name in ("a", "b", "c"):
        a = np.asarray(Image.open(tmp_path / "batched" / f"{name}_stylized.png"), dtype=np.int16)
        b = np.asarray(Image.open(tmp_path / "alone" / f"{name}_stylized.png"), dtype=np.int16)
        assert np.abs(a - b).max() <= 2, name
        meta = json.loads((tmp_path / "batched" / f"{name}_stylized.json").read_text())
        assert meta["batch"] == (1 if name == "c" else 2) and len(meta["history"]) == 4
    with pytest.raises(ValueError, match="batch_size=2 needs optimizer='adam'"):
        st.stylize_batch(src, style, tmp_path / "x", batch_size=2, size=64, steps=1)
    assert no_hooks(st)


def test_losses_are_read_only_on_reporting_steps(st, content, style, monkeypatch):
    from nstcam.style._progress import Progress

    flushes = []
    real = Progress.flush
    monkeypatch.setattr(Progress, "flush", lambda self: flushes.append(self.done) or real(self))
    img = st.stylize(content, style, size=32, steps=12, optimizer="adam", seed=0)
    assert len(img.info["nstcam"]["history"]) == 12
    assert set(flushes) == {12}, "without a callback the losses stay on the device until the end"
    flushes.clear()
    seen = []
    st.stylize(content, style, size=32, steps=12, optimizer="adam", progress=seen.append, progress_every=5)
    assert [i.step for i in seen] == [5, 10, 12] and set(flushes) == {5, 10, 12}


def test_without_cuda_the_compiled_path_is_off(st, content, style):
    assert st.device.type == "cpu" and not st._rt.compile
    st.stylize(content, style, size=32, steps=1)
    assert st._rt.compiled == {}


def test_compiled_step_matches_the_eager_one_on_cpu(style):
    """torch.compile on CPU (inductor, about 20 s to compile on 2 cores): the same images and losses.
    The content, size and layers of test_cuda_path.py's and test_selfcheck.py's compiled runs: one
    step that inductor's cache compiles once for the three modules (a fresh cache: CI's)."""
    content = pattern(1, 48, 32)
    kw = dict(
        size=32,
        steps=3,
        optimizer="adam",
        seed=0,
        style_layers=["relu1_1", "relu2_1"],
        content_layers=["relu2_1"],
    )
    eager = StyleTransfer("random", device="cpu").stylize(content, style, **kw)
    compiled_engine = StyleTransfer("random", device="cpu", compile=True)
    assert (
        compiled_engine.warmup(32, 21, style_layers=kw["style_layers"], content_layers=kw["content_layers"])
        > 0
    )
    compiled = compiled_engine.stylize(content, style, **kw)
    assert sum(bool(v) for v in compiled_engine._rt.compiled.values()) == 1  # one layer set compiled
    stats = compiled_engine.compile_stats
    assert stats["mismatches"] == 0 and stats["checked"] >= 2 and stats["failures"] == 0
    a, b = np.asarray(eager, dtype=np.int16), np.asarray(compiled, dtype=np.int16)
    assert np.abs(a - b).max() <= 2
    for e, c in zip(eager.info["nstcam"]["history"], compiled.info["nstcam"]["history"], strict=True):
        assert c["total"] == pytest.approx(e["total"], rel=1e-4)


def test_a_compiler_failure_falls_back_to_the_eager_step(content, style, monkeypatch, caplog):
    import nstcam.style._compiled as C

    def broken(*_args, **_kw):
        def fn(*_a):
            raise RuntimeError("no C++ compiler")

        return fn

    monkeypatch.setattr(C, "_build", broken)
    kw = dict(size=32, steps=3, optimizer="adam", seed=0)
    eager = StyleTransfer("random", device="cpu").stylize(content, style, **kw)
    with caplog.at_level("WARNING"):
        got = StyleTransfer("random", device="cpu", compile=True).stylize(content, style, **kw)
    # the self-check's first call raised: that size runs eagerly, said once, naming where it was raised
    # (torch's own asserts carry no message: the place is the clue) and never a whole path
    line = broken.__code__.co_firstlineno + 2
    said = f"(it raised RuntimeError at tests/test_style.py:{line}: no C++ compiler); that size runs eagerly"
    assert said in caplog.text and caplog.text.count("that size runs eagerly") == 1
    assert str(Path(__file__).parent) not in caplog.text
    assert np.array_equal(np.asarray(got), np.asarray(eager))
