"""The Explain a volume tab's handler and its slice viewer: a .npy volume in, its map on the volume's
voxels, a slice per slider position along any axis, a slice grid and the top classes out; refusals
name the argument or the file (never a server path) and the limit, before any model loads."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from conftest import marked
from PIL import Image

from nstcam.app.config import AppConfig, Models
from nstcam.app.tabs.cam_volume import AXES, along, shown_slice, slice_view, volume_handler
from nstcam.cam.volumes import grey_clip, load_volume


@pytest.fixture(scope="module")
def models():
    return Models(
        AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20, max_volume_values=40_000)
    )


@pytest.fixture(scope="module")
def scan(tmp_path_factory) -> Path:
    """A (1, 24, 32, 40) scan: noise, and a bright cube at z 8-15, y 10-19, x 12-23."""
    vol = np.random.default_rng(0).random((1, 24, 32, 40)).astype(np.float32) * 0.2
    vol[0, 8:16, 10:20, 12:24] += 1.0
    path = tmp_path_factory.mktemp("vol") / "scan.npy"
    np.save(path, vol)
    return path


def test_a_volume_gives_a_slice_viewer_a_grid_and_its_classes(models, scan):
    view, grid, slider, rows, viewed = volume_handler(models, str(scan), "r3d_18", "gradcam")
    assert slider["maximum"] == 23 and slider["value"] == 12 and slider["interactive"] is True
    assert Image.open(view).size == marked((40 * 9, 32 * 9))  # slice 12 of 24 along depth, 9 px a voxel
    assert Image.open(grid).size == marked((4 * 40 * 4, 3 * 32 * 4))  # 12 slices, 4 to a row, 4 px a voxel
    assert Image.open(grid).text["nstcam:random_weights"] == "true"  # the grid says so, as the rows do
    assert Image.open(view).text["nstcam:random_weights"] == "true"
    assert [r[0] for r in rows] == [1, 2, 3] and all(
        "(random weights)" in r[2] and 0 <= r[3] <= 1 for r in rows
    )
    # the map lies on the volume's own voxels, and is the engine's, through the Python API
    cam = models.cam("r3d_18", "", "gradcam")
    want = cam.explain_volume(grey_clip(load_volume(scan), cam.preprocessing.mean, cam.preprocessing.std))[0]
    assert viewed.result.heatmap.shape == (24, 32, 40)
    assert viewed.result.volume.shape == (1, 24, 32, 40)  # the session keeps one grey channel
    np.testing.assert_allclose(viewed.result.heatmap, want.heatmap, atol=1e-6)
    assert viewed.result.index == rows[0][1] == want.index
    # the slider draws any slice, each its own file
    first, last = slice_view(models, viewed, 0), slice_view(models, viewed, 23.0)
    assert first != last and Image.open(first).size == Image.open(last).size == marked((360, 288))
    assert slice_view(models, None, 5) is None  # nothing explained yet: nothing drawn


@pytest.mark.parametrize(
    ("axis", "depth", "size"), [("height (H)", 32, (360, 216)), ("width (W)", 40, (384, 288))]
)
def test_the_viewer_slices_along_any_axis(models, scan, axis, depth, size):
    view, _, slider, _, viewed = volume_handler(models, str(scan), "r3d_18", "layercam", axis)
    assert viewed.axis == AXES[axis] and slider["maximum"] == depth - 1
    assert Image.open(view).size == marked(size) == Image.open(slice_view(models, viewed, depth - 1)).size


def test_the_slider_refuses_slices_out_of_range(models, scan):
    *_, viewed = volume_handler(models, str(scan), "r3d_18", "gradcam")
    for bad in (24, -1, "3", None):
        with pytest.raises(gr.Error, match="index must be between 0 and 23"):
            slice_view(models, viewed, bad)


def test_a_slice_typed_past_an_end_shows_that_end_and_says_so_in_the_box(models, scan):
    """Issue 50.1: 100 (or 39) typed in the box of a 24-slice volume: the last slice, the box set to
    23; before, Gradio's range check raised and the view turned into an error badge."""
    *_, viewed = volume_handler(models, str(scan), "r3d_18", "gradcam")
    for typed, end in ((100, 23), (39, 23), (-5, 0), (23.0, 23)):
        view, box = shown_slice(models, viewed, typed)
        assert Image.open(view).size == Image.open(slice_view(models, viewed, end)).size
        assert box == (gr.skip() if typed == end else gr.update(value=end))
    assert shown_slice(models, None, 100) == (None, gr.skip())
    with pytest.raises(gr.Error, match="index must be a number, got str"):
        shown_slice(models, viewed, "3")


def test_slice_along_after_explaining_turns_the_view_without_running_the_model(models, scan, monkeypatch):
    """Issue 50.2: switching depth to height after explaining re-slices the kept map: the slider's
    range follows (0-31 for the 32 heights), the grid and the view along it; the model is not run."""
    *_, viewed = volume_handler(models, str(scan), "r3d_18", "gradcam")
    cam = models.cam("r3d_18", "", "gradcam")
    monkeypatch.setattr(cam, "explain_volume", lambda *a, **k: pytest.fail("the model ran again"))
    view, grid, slider, turned = along(models, viewed, "height (H)")
    assert turned.axis == 1 and turned.result is viewed.result
    assert slider["maximum"] == 31 and slider["value"] == 16
    assert Image.open(view).size == marked((40 * 9, 24 * 9))  # a height slice: W x D
    assert Image.open(grid).size[0] == 4 * 40 * 4
    want = Image.open(slice_view(models, turned, 16))
    assert np.array_equal(np.asarray(Image.open(view)), np.asarray(want))
    assert along(models, turned, "height (H)") == (gr.skip(),) * 4  # the same axis: nothing to do
    assert along(models, None, "width (W)") == (gr.skip(),) * 4  # nothing explained yet


def _npy(tmp_path: Path, name: str, array: np.ndarray | None = None, raw: bytes | None = None) -> Path:
    path = tmp_path / name
    if raw is not None:
        path.write_bytes(raw)
    else:
        np.save(path, array, allow_pickle=True)
    return path


@pytest.mark.parametrize(
    ("make", "params", "message"),
    [
        (None, {}, "Upload a volume"),
        ("ok", {"model": "resnet18"}, "model must be one of r3d_18, mc3_18, r2plus1d_18 on this server"),
        ("ok", {"method": "scorecam"}, "method must be one of gradcam"),
        ("ok", {"axis": "diagonal"}, "axis must be one of depth (D), height (H), width (W)"),
        ("objects", {}, "Bad volume: volume: objects.npy holds Python objects"),
        ("big", {}, "Bad volume: volume: big.npy holds 48,000 values, over the limit of 40,000"),
        ("small", {}, "Bad volume: small.npy is 4 x 16 x 16 voxels; each side needs at least 8"),
        ("png", {}, "Bad volume: volume: scan.png is not a .npy file"),
        ("truncated", {}, "Bad volume: volume: truncated.npy is not a readable .npy file"),
    ],
)
def test_bad_volumes_are_refused_by_name_before_any_model_loads(models, tmp_path, make, params, message):
    paths = {
        "ok": lambda: _npy(tmp_path, "ok.npy", np.zeros((16, 16, 16), np.float32)),
        "objects": lambda: _npy(tmp_path, "objects.npy", np.array([{"a": 1}] * 8, dtype=object)),
        "big": lambda: _npy(tmp_path, "big.npy", np.zeros((30, 40, 40), np.float32)),
        "small": lambda: _npy(tmp_path, "small.npy", np.zeros((1, 4, 16, 16), np.float32)),
        "png": lambda: _npy(tmp_path, "scan.png", raw=b"\x89PNG\r\n\x1a\n"),
        "truncated": lambda: _npy(tmp_path, "truncated.npy", raw=b"\x93NUMPY\x01\x00\x10"),
    }
    volume = paths[make]() if make else None
    with pytest.raises(gr.Error) as e:
        volume_handler(models, None if volume is None else str(volume), **params)
    assert message in e.value.message and str(tmp_path) not in e.value.message
