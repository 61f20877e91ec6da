"""Issue 50: what a new user tripped on, beside the marks (``test_marks.py``) and the volume viewer
(``test_app_cam_volume.py``): ranges from one source, clip scores that read, a bad upload's reason
kept, logs that say what happened."""

from __future__ import annotations

import inspect
import logging
import re

import gradio as gr
import pytest
from conftest import pattern

from nstcam.app import AppConfig, Models, build_demo
from nstcam.app.guard.limits import FEATHER_RANGE
from nstcam.app.run.listen import for_people
from nstcam.app.run.running import fail
from nstcam.app.tabs.subject import subject_handler
from nstcam.app.tabs.video import video_handler
from nstcam.cam import GradCAM, StoppedEarly, score_text
from nstcam.style import StyleTransfer
from nstcam.video import TEMPORAL_WEIGHT_RANGE
from nstcam.weights import build_model


@pytest.fixture(scope="module")
def demo():
    cfg = AppConfig(random_weights=True, device="cpu")
    return build_demo(cfg, Models(cfg))


def test_every_range_an_endpoint_states_is_its_sliders(demo):
    """The API description, the slider (which the request gate reads) and the handler's check share
    one range: ``/stylize_video`` said 0 to 10000 and refused 5000; ``feather`` said 0 to 64 and its
    slider stopped at 32."""
    checked = 0
    for f in demo.fns.values():
        if f.api_visibility != "public" or not f.api_name:
            continue
        names = list(inspect.signature(f.fn).parameters)
        for comp, name in zip(f.inputs, names, strict=False):
            said = re.search(rf"^\s*{name}: .*?(-?[\d.]+) to (-?[\d.]+)", f.fn.__doc__ or "", re.M)
            if isinstance(comp, gr.Slider) and said:
                assert (float(said[1]), float(said[2].rstrip("."))) == (comp.minimum, comp.maximum), (
                    f.api_name,
                    name,
                )
                checked += 1
    assert checked >= 15
    assert TEMPORAL_WEIGHT_RANGE == (0.0, 1000.0) and FEATHER_RANGE == (0, 64)


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda m, p: video_handler(m, p, p, temporal_weight=1001), "temporal_weight must be between 0 and"),
        (lambda m, p: subject_handler(m, p, p, feather=65), "feather must be between 0 and 64"),
    ],
)
def test_the_handlers_check_the_same_ranges(tmp_path, call, said):
    m = Models(AppConfig(random_weights=True, device="cpu"))
    photo = tmp_path / "p.png"
    pattern(1).save(photo)
    with pytest.raises(gr.Error, match=said):
        out = call(m, str(photo))
        next(out) if hasattr(out, "__next__") else None


def test_clip_scores_read_as_numbers_not_a_flat_zero():
    """The burned-in label said "smoking 0.00" and the legend "(mean 0.00)" where the table said 0.0041."""
    assert [score_text(v) for v in (0.0041, 0.0037, 0.87, 0.1, 0.04999, 1.0)] == [
        "0.0041",
        "0.0037",
        "0.87",
        "0.10",
        "0.05",
        "1.00",
    ]


def test_a_bad_uploads_reason_stays_when_run_is_pressed():
    """Issue 50.6: "Bad image (image): notanimage.png is not an image…" in the Status, then Explain:
    the Status kept that, instead of turning to "Upload an image."."""

    def handler(image, top_k=1, request: gr.Request = None):
        if image is None:
            raise gr.Error("Upload an image.", print_exception=False)
        return f"{image}:{top_k}"

    page = for_people(handler, 1, 1, True, lambda *a: "done", reads_status=True)
    params = list(inspect.signature(page).parameters)
    assert params == ["image", "top_k", "request", "shown_status"]  # Gradio fills the request in place
    reason = "⚠️ Bad image (image): notanimage.png is not an image"
    assert page(None, 1, None, reason) == (gr.skip(), reason)  # the reason stays
    assert page(None, 1, None, "") == (gr.skip(), "⚠️ Upload an image.")
    assert page("a.png", 2, None, reason) == ("a.png:2", "done")


def test_a_random_weights_warning_is_logged_once_per_model(caplog):
    """It was logged twice per engine (the builder's, then the engine's), and again by each engine
    sharing the model."""
    with caplog.at_level(logging.WARNING):
        net = build_model("resnet18", "random")
        GradCAM(net, target_layer="layer4")
        GradCAM(net, target_layer="layer3")
        StyleTransfer(weights="random", device="cpu")
    said = [r.getMessage() for r in caplog.records if "RANDOM weights" in r.getMessage()]
    assert len([s for s in said if s.startswith("resnet18")]) == 1
    assert len([s for s in said if s.startswith("vgg16_bn")]) == 1


def test_a_cancel_is_logged_as_stopped_not_refused(caplog):
    with caplog.at_level(logging.INFO, logger="nstcam.app"):
        e = fail(StoppedEarly("cancelled after 2 of 15 windows"))
    assert e.message == "cancelled after 2 of 15 windows"
    assert "request stopped early: cancelled after 2 of 15 windows" in caplog.text
    assert "request refused" not in caplog.text
