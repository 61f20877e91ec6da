"""Tiled stylisation (issue 14): the window layout, whole-image style Grams read in windows, steps
and progress, batches, cancel, errors, on_memory="reduce" choosing a tile, and, in fresh processes,
peak memory, quality, seams and the calibrated memory estimate."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _numeric import bound
from conftest import pattern
from PIL import Image

from nstcam import Cancelled, count_hooks, load_image
from nstcam.image import image_to_tensor, resize_long_side
from nstcam.style._targets import tiled_grams
from nstcam.style._tiles import blend_weight
from nstcam.style._windows import starts, tile_grid
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.losses.gram import gram

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "nstcam" / "assets" / "samples"


@pytest.mark.parametrize(
    ("length", "tile", "overlap"), [(640, 160, 40), (426, 160, 40), (100, 64, 16), (64, 64, 8)]
)
def test_windows_cover_the_image_with_the_overlap(length, tile, overlap):
    s = starts(length, tile, overlap)
    assert s[0] == 0 and s[-1] + min(tile, length) == length and s == sorted(s)
    assert all(b - a <= tile - overlap for a, b in itertools.pairwise(s))  # overlap at least
    grid = tile_grid(length, length + 7, tile, overlap)
    assert len({(w[0].stop - w[0].start, w[1].stop - w[1].start) for w in grid}) == 1  # one shape
    assert [w[0].start for w in grid] == sorted(w[0].start for w in grid)  # row-major


def test_blend_weights_ramp_only_at_inner_edges():
    h, w, tile, ov = 200, 300, 96, 24
    total = torch.zeros(h, w)
    for win in tile_grid(h, w, tile, ov):
        wt = blend_weight(win, h, w, ov, torch.device("cpu"))[0, 0]
        assert float(wt.min()) > 0 and float(wt.max()) == 1.0
        total[win] += wt
    assert float(total.min()) > 0.5  # every pixel is covered with weight
    first = blend_weight(tile_grid(h, w, tile, ov)[0], h, w, ov, torch.device("cpu"))[0, 0]
    assert float(first[0, 0]) == 1.0 and float(first[-1, -1]) < 0.05  # image edge kept, inner edge ramped


def test_tiled_grams_equal_whole_image_grams(st):
    x = image_to_tensor(resize_long_side(load_image(SAMPLES / "brick.png"), 256))
    layers = ["relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1"]
    with VGGFeatureHooks(st.net, layers) as hooks, torch.no_grad():
        whole = {k: gram(v) for k, v in st._rt.features(hooks, x).items()}
        tiled = tiled_grams(st._rt, hooks, x, layers, 128)
    for k in layers:
        bound(
            f"{k}: tiled vs whole Gram, relative",
            float((whole[k] - tiled[k]).norm() / whole[k].norm()),
            "<",
            0.05,
        )
    torch.testing.assert_close(tiled["relu1_1"], whole["relu1_1"], atol=1e-4, rtol=1e-4)  # no context lost


def test_steps_count_per_window_and_small_scales_run_whole(st):
    content, style = pattern(1, 152, 96), pattern(2, 64, 64)
    seen = []
    img = st.stylize(
        content, style, scales=[64, 152], steps=2, tile=64, tile_overlap=16, optimizer="adam", seed=0,
        progress=lambda i: seen.append((i.step, i.total_steps, i.scale)),
    )  # fmt: skip
    params = img.info["nstcam"]["params"]
    windows = len(tile_grid(96, 152, 64, 16))
    assert params["tiles_per_scale"] == [1, windows] and params["tile"] == 64
    assert seen[-1][:2] == (2 + 2 * windows, 2 + 2 * windows)
    assert len(img.info["nstcam"]["history"]) == 2 + 2 * windows
    assert img.size == (152, 96) and count_hooks(st.net) == 0


def test_tile_at_or_above_the_size_equals_the_untiled_run(st):
    content, style = pattern(3, 80, 56), pattern(4, 64, 64)
    kw = dict(size=80, steps=3, optimizer="adam", seed=0)
    a = np.asarray(st.stylize(content, style, **kw), float)
    b = np.asarray(st.stylize(content, style, tile=80, **kw), float)
    assert np.abs(a - b).max() == 0


def test_batched_tiled_equals_one_at_a_time(st, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        pattern(10 + i, 120, 80).save(src / f"c{i}.png")
    style = pattern(20, 64, 64)
    kw = dict(size=120, steps=2, optimizer="adam", seed=0, tile=64, tile_overlap=16, progress_bar=False)
    st.stylize_batch(src, style, tmp_path / "batched", batch_size=2, **kw)
    st.stylize_batch(src, style, tmp_path / "single", batch_size=1, **kw)
    for i in range(2):
        a = np.asarray(Image.open(tmp_path / "batched" / f"c{i}_stylized.png"), float)
        b = np.asarray(Image.open(tmp_path / "single" / f"c{i}_stylized.png"), float)
        # a batch's convolutions differ from one image's by float noise, which Adam's step (about lr
        # wherever a gradient is nearly 0) turns into grey levels at rare pixels: a largest difference
        # of 2 held by default and failed under ONEDNN_MAX_CPU_ISA=SSE41 (tests/numeric_matrix.py).
        # Bound what Adam allows (two runs, 2 steps of lr 0.02 each) and the mean and share moved
        d = np.abs(a - b)
        bound("largest difference (grey levels)", d.max(), "<=", 2 * 2 * 0.02 * 255 + 1)
        bound("mean grey-level difference, batch vs alone", d.mean(), "<", 1.0)
        bound("share of pixels more than 2 levels apart", (d > 2).mean(), "<", 0.1)


def test_tiled_calls_from_threads_equal_sequential_ones(st):
    from concurrent.futures import ThreadPoolExecutor

    jobs = [
        (pattern(30 + i, 120, 80), pattern(40 + i, 64, 64), preserve)
        for i, preserve in enumerate([False, "histogram", "luminance"])
    ]

    def run(job):
        content, style, preserve = job
        img = st.stylize(
            content, style, size=120, steps=2, tile=64, optimizer="adam", seed=0, preserve_color=preserve
        )
        return np.asarray(img)

    sequential = [run(j) for j in jobs]
    with ThreadPoolExecutor(3) as pool:  # the three at once (twice each before issue 74: no new case)
        threaded = list(pool.map(run, jobs))
    for i, got in enumerate(threaded):
        assert np.array_equal(got, sequential[i % 3])
    assert count_hooks(st.net) == 0


def test_cancel_inside_a_window_returns_the_whole_image(st):
    content, style = pattern(5, 152, 96), pattern(6, 64, 64)
    with pytest.raises(Cancelled) as e:
        st.stylize(
            content, style, size=152, steps=3, tile=64, tile_overlap=16, optimizer="adam",
            progress=lambda i: i.step < 7,
        )  # fmt: skip
    assert e.value.image.size == (152, 96)
    assert count_hooks(st.net) == 0


def test_tile_errors_name_the_argument(st):
    content, style = pattern(7, 120, 80), pattern(8, 64, 64)
    with pytest.raises(ValueError, match="tile must be at least 64"):
        st.stylize(content, style, size=120, steps=1, tile=32)
    with pytest.raises(ValueError, match="tile_overlap must be at most 16"):
        st.stylize(content, style, size=120, steps=1, tile=64, tile_overlap=40)
    mask = np.ones((80, 120), np.float32)
    with pytest.raises(ValueError, match="tile does not combine with a style_mask in mask_mode='optimize'"):
        st.stylize(content, style, size=120, steps=1, tile=64, style_mask=mask)
    img = st.stylize(content, style, size=120, steps=1, tile=64, style_mask=mask, mask_mode="blend")
    assert img.size == (120, 80)


def test_on_memory_reduce_chooses_a_tile_before_shrinking(st, monkeypatch):
    import nstcam.style._memory as M

    content, style = pattern(9, 304, 200), pattern(10, 64, 64)
    whole = st.estimate_memory(304, 200, optimizer="adam", steps=1)
    tiled = st.estimate_memory(304, 200, optimizer="adam", steps=1, tile=128)
    assert tiled < whole / 2
    monkeypatch.setattr(M, "available_memory", lambda device: int(tiled / 0.9) + 1)
    img = st.stylize(content, style, size=304, steps=1, optimizer="adam", on_memory="reduce", tile_overlap=32)
    params = img.info["nstcam"]["params"]
    assert img.size == (304, 200) and params["tile"] == 128  # 256 does not fit; 128 does
    with pytest.raises(Exception, match=r"304 px needs about .* GiB .*or tile=512"):
        st.stylize(content, style, size=304, steps=1, optimizer="adam")


def _probe(*args: str) -> dict:
    command = [sys.executable, str(ROOT / "tests" / "_tile_probe.py"), *args]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=True)  # 5x slower too
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tiled_in_half_the_memory_without_seams_and_the_estimate_is_calibrated():
    """384 px, tile 96, 2 Adam steps, then 2 L-BFGS steps untiled at 512 px in the same process (its
    peak reset before each run: the L-BFGS estimate read -1.7 % off there, -2.1 % in a process of
    its own; -46 % and -51 % under old-cpu; one process instead of two since issue 74, 25 s alone).
    The quality figure at 640 px (the tiled Gram distance within 1.5x of the untiled one's; 1.11
    measured) lives in ``bench_style.py --tile-quality``: at this size the windows are small next to
    the VGG's receptive field and the ratio is 1.6. After 2 steps from the photo the judge's distances
    of both runs read the photo's (1.00 apart, 2026-12-06): the test reads instead how far each run
    moved off the photo (a window left as the photo would not), without building the judge (issue 74)."""
    r = _probe("384", "96", "2", "--lbfgs-at", "512", "--no-judge", "--moves")  # one process
    bound("tiled / untiled peak memory", r["tiled_peak"] / r["untiled_peak"], "<=", 0.5)  # 0.18 measured
    # the tiles are painted as far as the whole picture is, not left as the photo
    bound("tiled / untiled move off the photo", r["tiled_move"] / r["untiled_move"], ">=", 0.5)  # 0.88
    bound("largest seam (a row or column standing out)", max(r["tiled_seams"]), "<=", 2.5)  # 1.88
    # The model is fitted to this CPU's default kernels. Under ONEDNN_MAX_CPU_ISA=SSE41
    # (an old CPU's convolutions) the peaks are 1.6-2x: 39 % off tiled, 43 % untiled and 51 % for L-BFGS
    # at 512 px in a clean-clone CI run (tests/numeric_matrix.py; not refitted yet: docs/development.md)
    for kind in ("tiled", "untiled"):
        error = abs(r[f"{kind}_estimate"] - r[f"{kind}_peak"]) / r[f"{kind}_peak"]
        bound(f"{kind}: memory estimate off its peak, relative", error, "<=", 0.6)  # 0.37, 0.04 measured
    error = abs(r["lbfgs_estimate"] - r["lbfgs_peak"]) / r["lbfgs_peak"]
    bound("L-BFGS 512 px: memory estimate off its peak, relative", error, "<=", 0.6)  # 0.14 measured
