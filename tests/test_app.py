"""The Gradio app's handlers as plain functions (no server), with random weights."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from nstcam import count_hooks
from nstcam.webapp import (
    AppConfig,
    Models,
    build_demo,
    cam_handler,
    layer_choices,
    stylize_handler,
    subject_handler,
)


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
    previews, final = items[:-1], items[-1]
    assert [p[1].split(" ·")[0] for p in previews] == ["step 2/4", "step 4/4"]
    img, status, path = final
    assert img.size == (64, 43)
    assert status.startswith("done: 64x43, 4 steps") and "RANDOM weights" in status
    assert Image.open(path).size == (64, 43) and Path(path).suffix == ".png"
    assert count_hooks(models.style().net) == 0


def test_stylize_blend_and_errors(models, files):
    c, s, bad = files
    *_, (img, _, _) = stylize_handler(models, str(c), str(s), str(c), 0.5, 64, 2)
    assert img.size == (64, 43)
    with pytest.raises(gr.Error, match="Bad image: .*garbage.png is not an image"):
        list(stylize_handler(models, str(bad), str(s), size=64, steps=2))
    with pytest.raises(gr.Error, match="size must be between 64 and 128"):
        list(stylize_handler(models, str(c), str(s), size=4096, steps=2))
    with pytest.raises(gr.Error, match="Upload a content image"):
        list(stylize_handler(models, None, str(s), size=64, steps=2))
    *_, (img, _, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 1)  # still serving
    assert img is not None


def test_stylize_cancel_stops_worker(models, files):
    c, s, _ = files
    gen = stylize_handler(models, str(c), str(s), None, 0.0, 64, 20, preview_every=1)
    first = next(gen)
    assert first[1].startswith("step 1/20")
    gen.close()  # what Gradio's Cancel does to the generator
    assert count_hooks(models.style().net) == 0
    *_, (_, status, _) = stylize_handler(models, str(c), str(s), None, 0.0, 64, 2)
    assert status.startswith("done")


def test_cam_handler_outputs(models, files):
    c, _, bad = files
    gallery, heat, table = cam_handler(models, str(c), "resnet18", "layer4", "gradcam", 3)
    assert len(gallery) == 3 and all(im.size == (90, 60) for im, _ in gallery)
    assert "RANDOM" in gallery[0][1] and "p=" in gallery[0][1]
    assert heat.size == (90, 60) and heat.mode == "L"
    assert [row[0] for row in table] == [1, 2, 3]
    probs = [row[3] for row in table]
    assert probs == sorted(probs, reverse=True)
    with pytest.raises(gr.Error, match="Bad image"):
        cam_handler(models, str(bad), "resnet18")
    with pytest.raises(gr.Error, match="unknown layer 'layer9'"):
        cam_handler(models, str(c), "resnet18", "layer9")
    with pytest.raises(gr.Error, match="top-k must be between 1 and 10"):
        cam_handler(models, str(c), "resnet18", top_k=50)
    gallery, _, _ = cam_handler(models, str(c), "resnet18", "layer3.1", "layercam", 1)
    assert len(gallery) == 1
    assert count_hooks(models.cam("resnet18", "layer4", "gradcam").model) == 0


def test_layer_choices_and_demo_endpoints(models):
    layers = layer_choices("resnet18")
    assert "layer4" in layers and "layer4.1" in layers and "layer4.2" not in layers
    assert "layer4.2" in layer_choices("resnet50")
    demo = build_demo(models.config, models)
    names = {fn.api_name for fn in demo.fns.values()}
    assert {"stylize", "gradcam", "subject_aware"} <= names


def test_limits_follow_device(monkeypatch):
    monkeypatch.delenv("NSTCAM_MAX_SIZE", raising=False)
    cfg = AppConfig(random_weights=True, device="cpu")
    assert cfg.max_size == 512 and cfg.max_steps == 300
    monkeypatch.setenv("NSTCAM_MAX_SIZE", "256")
    assert AppConfig(device="cpu").max_size == 256


def test_subject_handler_outputs(models, files):
    c, s, bad = files
    mask, result, before, after, md = subject_handler(
        models, str(c), str(s), "background", 0.5, 4.0, 64, 3, "resnet18"
    )
    assert mask.size == (90, 60) and mask.mode == "L"
    assert result.size == (64, 43)
    assert len(before) == 3 and len(after) == 3 and before[0][1].startswith("before: ")
    assert "map IoU" in md and "RANDOM" in md
    with pytest.raises(gr.Error, match="Bad image"):
        subject_handler(models, str(bad), str(s), size=64, steps=2, arch="resnet18")
