"""Issue 50.3: every file made from random weights says so, in its metadata and visibly, whatever
writes it (the Python API's documented save, the CLI, the app) and at any size from 64 px up; the
label sits in a margin below the picture, wrapped to its width, and never hides a pixel of it."""

from __future__ import annotations

import av
import numpy as np
import pytest
from _media import panning, write_clip
from conftest import assert_marked, marked, pattern
from PIL import Image

from nstcam import GradCAM, StyleTransfer, feature_maps, save_image
from nstcam._mark import RANDOM_LABEL, _layout, _pad, _width, caption_strip, mark_random, tag_weights
from nstcam.cli import main
from nstcam.video import VideoWriter

SIZES = (64, 128, 512)


@pytest.fixture(scope="module")
def st() -> StyleTransfer:
    return StyleTransfer(weights="random", device="cpu")


@pytest.fixture(scope="module")
def cam() -> GradCAM:
    return GradCAM("resnet18", weights="random", device="cpu")


def _fits(width: int) -> list[str]:
    """The label's lines at ``width``: each drawn whole inside the picture's width."""
    size, lines = _layout((RANDOM_LABEL,), width)
    assert " ".join(lines) == RANDOM_LABEL  # every word, in order
    assert all(_width(line, size) <= width - 2 * _pad(size) for line in lines), (width, lines)
    return lines


@pytest.mark.parametrize("width", [64, 65, 80, 96, 128, 160, 200, 256, 384, 512, 1024, 2048])
def test_the_mark_is_a_margin_below_that_fits_the_width_and_hides_nothing(width):
    noise = np.random.default_rng(width).integers(0, 256, (max(48, width * 3 // 4), width, 3), np.uint8)
    img = tag_weights(Image.fromarray(noise), "random", True)
    out = mark_random(img)
    assert out.size == marked(img.size) and out.info["nstcam"]["marked"] is True
    assert np.array_equal(np.asarray(out)[: img.height], np.asarray(img))  # every pixel as computed
    assert_marked(out)
    _fits(width)
    assert mark_random(out) is out  # once: a saved result is not labelled twice
    assert mark_random(tag_weights(pattern(1), "official", False)).size == (64, 48)  # real weights: as is


def test_the_label_grows_with_the_picture_and_wraps_only_where_it_must():
    sizes = [_layout((RANDOM_LABEL,), w)[0] for w in (64, 128, 256, 512, 1024)]
    assert sizes == sorted(sizes) and sizes[0] >= 7 and sizes[-1] >= 3 * sizes[0]
    assert len(_fits(512)) == 1 and len(_fits(64)) > 1  # one line where it fits, wrapped at 64 px
    caption = caption_strip(["passing American football (not in game) 0.0041", "0.25 s"], 160)
    assert caption.width == 160  # the contact sheet's label was cut at its cell's edge; now wrapped


@pytest.mark.parametrize("size", SIZES)
def test_the_python_apis_save_keeps_the_tag_and_draws_the_mark(st, cam, tmp_path, size):
    """README's snippets save with ``save_image``: the style result, a map's overlay, a feature grid."""
    photo = pattern(2, size, size * 3 // 4)
    img = st.stylize(photo, pattern(3), size=size, steps=1, seed=0)
    (r,) = cam.explain(photo, top_k=1)
    grid = feature_maps(st, photo, "relu1_1", top=4).grid
    for name, result in [("style.png", img), ("overlay.png", r.overlay), ("grid.png", grid)]:
        saved = Image.open(save_image(result, tmp_path / name))
        assert saved.text["nstcam:random_weights"] == "true" and saved.size == marked(result.size), name
        assert np.array_equal(np.asarray(saved)[: result.height], np.asarray(result.convert("RGB"))), name
        assert_marked(saved)
    jpeg = Image.open(save_image(img, tmp_path / "style.jpg"))
    assert jpeg.info["comment"] == RANDOM_LABEL.encode() and jpeg.size == marked(img.size)


@pytest.mark.parametrize("size", (64, 128))
def test_a_stylised_clip_of_random_weights_says_so_under_each_frame_and_in_its_tags(st, tmp_path, size):
    clip = write_clip(tmp_path / "in.mp4", panning(3, w=size, h=size * 3 // 4))
    r = st.stylize_video(clip, pattern(3), tmp_path / "out.mp4", size=size, steps=1, temporal_weight=0)
    with av.open(str(r.path)) as f:
        assert f.metadata.get("comment") == RANDOM_LABEL
        frames = [fr.to_ndarray(format="rgb24") for fr in f.decode(video=0)]
    w, h = r.size
    strip = np.asarray(caption_strip([RANDOM_LABEL], w)).astype(float)
    for a in frames:
        assert a.shape[:2] == (h + strip.shape[0] + strip.shape[0] % 2, w)  # the picture, then the label
        foot = a[h : h + strip.shape[0]].astype(float)
        assert np.abs(foot - strip).mean() < 12 and foot.max() > 200  # H.264's loss, the text still there


def test_a_writer_footer_pads_to_even_sides_and_a_folder_of_frames_gets_it_too(tmp_path):
    footer = caption_strip([RANDOM_LABEL], 512)
    for out in (tmp_path / "a.mp4", tmp_path / "frames"):
        with VideoWriter(out, 12, (512, 384), footer=footer) as wr:
            wr.write(np.zeros((384, 512, 3), np.uint8))
    with av.open(str(tmp_path / "a.mp4")) as f:
        (frame,) = f.decode(video=0)
        assert (frame.width, frame.height) == (512, 384 + footer.height + footer.height % 2)
    assert Image.open(tmp_path / "frames" / "frame_000001.png").size == (512, 384 + footer.height)


def test_the_cli_marks_a_clip_its_sheet_and_a_stylised_clip(tmp_path):
    clip = write_clip(tmp_path / "walk.mp4", panning(3, w=64, h=48))
    style = tmp_path / "s.png"
    pattern(3).save(style)
    out = tmp_path / "walk_styled.mp4"
    run = ["video", str(clip), "--style", str(style), "-o", str(out), "--weights", "random", "--size", "64"]
    assert main([*run, "--steps", "1"]) == 0
    with av.open(str(out)) as f:
        assert f.metadata.get("comment") == RANDOM_LABEL
    cams = tmp_path / "cams"
    assert main(["cam", str(clip), "-o", str(cams), "--arch", "resnet18", "--weights", "random"]) == 0
    (sheet,) = cams.glob("*sheet*.png")
    shown = Image.open(sheet)
    assert shown.text["nstcam:random_weights"] == "true"
    assert_marked(shown)
    (overlay,) = [p for p in cams.glob("*.mp4")]
    with av.open(str(overlay)) as f:
        assert f.metadata.get("comment") == RANDOM_LABEL


def test_the_apps_files_are_tagged_and_marked_the_heatmap_and_the_video_included(tmp_path):
    from nstcam.app.config import AppConfig, Models
    from nstcam.app.tabs.cam import cam_handler
    from nstcam.app.tabs.video import video_handler

    models = Models(AppConfig(random_weights=True, device="cpu"))
    photo = tmp_path / "photo.png"
    pattern(4, 128, 96).save(photo)
    gallery, heat, _ = cam_handler(models, str(photo), "resnet18", "layer4", "gradcam", 2)
    for path in [heat, *(g[0] for g in gallery)]:  # the heatmap had neither tag nor label
        shown = Image.open(path)
        assert shown.text["nstcam:random_weights"] == "true" and shown.size == marked((128, 96)), path
        assert_marked(shown)
    clip = write_clip(tmp_path / "walk.mp4", panning(3, w=64, h=48))
    *_, (_, status, video) = video_handler(models, str(clip), str(photo), size=64, steps=1)
    assert status.startswith("done") and "RANDOM" in status
    with av.open(video) as f:
        assert f.metadata.get("comment") == RANDOM_LABEL
        (first, *_) = f.decode(video=0)
        assert first.height > 48  # the picture, then the label
