"""Issue 76.3: a print is its preview refined.

Past ``PREVIEW_SIDE`` (512 px), the default scales and steps are a print's: the preview's own plan
first (256 and 512 px, 40 and 20 steps), so the run passes through the very image the preview
showed, then a few steps at each doubling up to the size asked; where the untiled run is estimated
past ``PRINT_MEMORY`` (3 GiB), the scales past the preview go in tiles. Here the preview's side is
lowered to 32 px so that a whole print runs in a test; 512-8192 px: ``bench_print.py``.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
from PIL import Image

from nstcam.style import _memory, _plan, options
from nstcam.style.options import print_steps, scales_and_steps


def _photo(h: int = 48, w: int = 64, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.mark.parametrize("size", [513, 1024, 2048, 3000, 4096, 8192])
def test_a_prints_plan_starts_with_the_previews_own(size):
    preview = scales_and_steps(512, None, None)
    scales, steps = scales_and_steps(size, None, None)
    assert (scales[:2], steps[:2]) == preview == ([256, 512], [40, 20])
    assert scales[-1] == size and all(b == 2 * a for a, b in itertools.pairwise(scales[1:-1]))
    assert steps[2:] == [max(2, 10 >> k) for k in range(len(scales) - 2)]
    assert scales_and_steps(2048, [1024, 2048], None) == ([1024, 2048], [40, 20])  # scales given: as before
    assert print_steps(6) == [40, 20, 10, 5, 2, 2]


@pytest.fixture
def small_preview(monkeypatch):
    """The preview's side at 32 px: a 128 px print is that preview refined at 64 and 128 px."""
    monkeypatch.setattr(options, "PREVIEW_SIDE", 32)
    monkeypatch.setattr(_plan, "PREVIEW_SIDE", 32)


def test_the_print_passes_through_the_previews_very_run(st, small_preview):
    """Every step of the preview's run is a step of the print's, with the same losses (so the same
    image at the preview's size), and the print's steps past it are few."""
    content, style = _photo(96, 144), _photo(32, 32, seed=1)  # 3:2: the steps as planned
    preview = st.stylize(content, style, size=32, seed=0, init="content")
    out = st.stylize(content, style, size=128, seed=0, init="content")
    params = out.info["nstcam"]["params"]
    assert params["scales"] == [32, 64, 128] and params["print_from"] == 32
    assert params["steps"] == [100, 10, 5] and preview.info["nstcam"]["params"]["print_from"] is None
    before, history = preview.info["nstcam"]["history"], out.info["nstcam"]["history"]
    assert [h["total"] for h in history[: len(before)]] == [h["total"] for h in before]
    assert len(history) <= len(before) + 15


def test_a_print_past_its_memory_budget_is_tiled_past_the_preview_and_says_so(
    st, small_preview, monkeypatch, caplog
):
    monkeypatch.setattr(_memory, "PRINT_MEMORY", 1)  # every untiled run is past it
    content, style = _photo(96, 144), _photo(32, 32, seed=1)
    with caplog.at_level(logging.INFO, logger="nstcam.style._memory"):
        out = st.stylize(content, style, size=128, seed=0, steps=[2, 1, 1])
    params = out.info["nstcam"]["params"]
    assert (
        params["tile"] == 32 and params["tiles_per_scale"][0] == 1 and min(params["tiles_per_scale"][1:]) > 1
    )
    assert params["init"] == "fast" or not _fast_here()
    [line] = [r.getMessage() for r in caplog.records if "print" in r.getMessage()]
    assert line.startswith("a 128 px print needs about ") and line.endswith(
        "its scales past 32 px are optimised in tiles of 32 px"
    )
    # a style per region does not combine with tiles: that print stays whole, and runs
    mask = np.zeros((96, 144), np.float32)
    mask[:, 72:] = 1
    regions = st.stylize(
        content, [style, _photo(32, 32, 2)], size=128, seed=0, steps=[2, 1, 1], style_masks=[mask, None]
    )
    assert regions.info["nstcam"]["params"]["tile"] is None and regions.size == (128, 85)


def test_a_print_within_its_budget_stays_whole(st, small_preview):
    out = st.stylize(_photo(96, 144), _photo(32, 32, 1), size=128, seed=0, steps=[1, 1, 1])
    assert out.info["nstcam"]["params"]["tile"] is None
    assert out.info["nstcam"]["params"]["tiles_per_scale"] == [1, 1, 1]


def _fast_here() -> bool:
    from nstcam.fast import fast_available

    return fast_available()
