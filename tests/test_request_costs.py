"""Work bounded before it starts: hostile clips and volumes refused in one line, in under 2 s and
under +300 MB (a clip of one frame per timebase tick, frames that grow after the first, a long thin
volume, volumes of every dtype); runs that say where they are, stop on request and at the server's
time budget, and say which."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from _media import growing_mjpeg, tick_clip
from conftest import pattern, rss_mb

from nstcam.app.config import AppConfig, Models
from nstcam.app.guard.cost import ESTIMATES, clip_cost, max_volume_side, request_cost, video_cost, volume_cost
from nstcam.app.run.running import halted, said_by
from nstcam.app.run.runs import Runs, RunStop
from nstcam.app.tabs.cam import cam_handler
from nstcam.app.tabs.cam_video import cam_video_handler
from nstcam.app.tabs.cam_volume import volume_handler
from nstcam.app.tabs.features import features_handler
from nstcam.app.tabs.panels.faithfulness import faithfulness_handler
from nstcam.app.tabs.style import stylize_handler
from nstcam.app.tabs.subject import subject_handler
from nstcam.app.tabs.video import video_handler
from nstcam.app.ui import build_demo
from nstcam.cam.volumes import load_volume
from nstcam.video import VideoError, check_limits, probe_video, read_frames


@pytest.fixture(scope="module")
def models() -> Models:
    return Models(AppConfig(random_weights=True, device="cpu"))


@pytest.fixture(scope="module")
def ticks(tmp_path_factory):
    """2,000 frames in 2 s: one per millisecond tick."""
    return tick_clip(tmp_path_factory.mktemp("tick") / "tick.mp4", frames=2000, rate=1000)


def _refused(fn, *args, **kwargs) -> tuple[str, float, float]:
    """The one-line refusal of ``fn(...)`` (a generator's first step too), its seconds and +MB."""
    before, start = rss_mb(), time.perf_counter()
    with pytest.raises(gr.Error) as e:
        out = fn(*args, **kwargs)
        if hasattr(out, "__next__"):
            next(out)
    return e.value.message, time.perf_counter() - start, rss_mb() - before


def test_a_clip_of_one_frame_per_tick_is_refused_by_its_decoded_frame_count(models, ticks):
    cfg = models.config
    info = probe_video(ticks, name="tick.mp4", max_frames=cfg.max_video_frames)
    assert info.duration < cfg.max_video_seconds  # its length in seconds passes the old limit
    assert info.more_frames and info.frames == cfg.max_video_frames + 1  # counting stopped there
    for handler, args in [(cam_video_handler, (str(ticks),)), (video_handler, (str(ticks), pattern(2)))]:
        said, seconds, grown = _refused(handler, models, *args)
        assert f"more than {cfg.max_video_frames:,} frames (1000 fps) are over the limit of" in said, said
        assert "Trim it to the first " in said and "601" not in said
        assert said.count("Tick Trim") == 1 and ". Tick Trim" in said and "\n" not in said
        assert seconds < 2 and grown < 300, (handler.__name__, seconds, grown)
    assert models._cams == {}  # refused before any model was built
    # trimmed: the start that fits, and never more windows than the frames the server takes
    assert check_limits(info, max_frames=cfg.max_video_frames, trim=True) == cfg.max_video_frames
    assert clip_cost(cfg, "tick.mp4", cfg.max_video_frames, 1, 1).check().units == cfg.max_video_frames
    with pytest.raises(
        gr.Error, match=r"tick.mp4: 601 frames would cost 601 windows, over this CPU server's limit of 600"
    ):
        clip_cost(cfg, "tick.mp4", 601, 1, 1).check()


def test_every_frame_is_held_to_the_pixel_limit_not_only_the_first(tmp_path):
    clip = growing_mjpeg(tmp_path / "grow.avi", big=6000, n_big=3)
    limit = 3840 * 2160
    info = probe_video(clip, name="grow.avi", max_pixels=limit)
    assert (info.width, info.height, info.frames) == (64, 64, 4)  # the first frame passes
    before = rss_mb()
    frames = []
    with pytest.raises(VideoError) as e:
        frames.extend(f.shape for f in read_frames(info))
    assert frames == [(64, 64, 3)]  # the first frame came; the second was never allocated
    assert "grow.avi: frame 2 cannot be decoded" in str(e.value) and "8.29 MP per frame" in str(e.value)
    assert rss_mb() - before < 300  # a 6000x6000 frame decoded is 108 MB of RGB, 54 of YUV
    unlimited = probe_video(clip, name="grow.avi", max_pixels=None)
    assert [f.shape for f in read_frames(unlimited)][1] == (6000, 6000, 3)  # the file itself is sound


def test_a_long_thin_volume_is_refused_from_its_header(models, tmp_path):
    cfg = models.config
    path = tmp_path / "thin.npy"
    np.save(path, np.zeros((1, 8, 8, cfg.max_volume_values // 64), np.float32))  # exactly the value limit
    said, seconds, grown = _refused(volume_handler, models, str(path))
    side = max_volume_side(cfg)
    assert said == (
        f"thin.npy is 8 x 8 x {cfg.max_volume_values // 64} voxels; each side may be at most {side} on "
        "this server (a long, thin volume costs 2 to 4 times a cube of as many voxels)"
    )
    assert seconds < 2 and grown < 300
    cube = volume_cost(cfg, "cube.npy", (128, 128, 128), 3).check()  # the largest cube fits, top-3
    assert cube.units == 8 * 128**3 <= cube.limit
    with pytest.raises(gr.Error, match=r"would cost 18,874,368 voxel-passes, over this CPU server's limit"):
        volume_cost(cfg, "v.npy", (128, 128, 144), 3).check()


@pytest.mark.parametrize(
    ("dtype", "said"),
    [
        ("S2", "holds bytes (dtype |S2)"),
        ("U2", "holds text (dtype <U2)"),
        ("M8[s]", "holds dates (dtype <M8[s])"),
        ("V4", "holds raw or structured records (dtype |V4)"),
        ([("a", "<f4"), ("b", "<i2")], "holds raw or structured records (dtype |V6)"),
        ("complex64", "holds complex numbers (complex64); a volume holds real numbers: send its magnitude"),
    ],
)
def test_a_volume_that_does_not_hold_real_numbers_is_refused_by_name(models, tmp_path, dtype, said):
    path = tmp_path / "v.npy"
    np.save(path, np.zeros((8, 8, 8), dtype=dtype))
    message, seconds, _ = _refused(volume_handler, models, str(path))
    assert message.startswith("Bad volume: volume: v.npy ") and said in message, message
    assert "\n" not in message and str(tmp_path) not in message and seconds < 2


@pytest.mark.parametrize("dtype", [">f4", "<f2", "<u2", ">i8", "longdouble", "bool"])
def test_real_numbers_of_any_width_and_byte_order_are_read_as_float32(tmp_path, dtype):
    values = np.arange(8 * 8 * 8).reshape(8, 8, 8) % 5
    np.save(tmp_path / "v.npy", values.astype(dtype))
    t = load_volume(tmp_path / "v.npy")
    assert t.dtype.is_floating_point and t.dtype.itemsize == 4
    np.testing.assert_array_equal(t[0].numpy(), values.astype(dtype).astype(np.float32))


def test_a_volume_run_says_each_pass_and_stops_when_told(models, tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.random.default_rng(0).random((16, 32, 32), np.float32))
    seen = []
    *_, rows, _ = volume_handler(models, str(path), progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)] and len(rows) == 3
    said, _, _ = _refused(volume_handler, models, str(path), progress=lambda d, t: False)
    assert said == "cancelled after 1 of 2 passes"


def test_clip_refusals_hint_at_trim_only_where_trimming_helps(models, tmp_path):
    (tmp_path / "list.mp4").write_text("#EXTM3U\n#EXT-X-TARGETDURATION:1\nfile:///etc/passwd\n")
    said, _, _ = _refused(cam_video_handler, models, str(tmp_path / "list.mp4"))
    assert "playlists" in said and "Trim" not in said and said.startswith("Bad video: list.mp4 is not")
    trimmable = VideoError(
        "x: 12.0 s is over the limit of 10 s. Trim it to the first 120 frames (10.0 s).", trimmable=True
    )
    assert trimmable.trimmable and not VideoError("x").trimmable


def test_a_run_stops_at_its_time_budget_and_says_so():
    runs = Runs(budget=0.2)
    stop = runs.start("gradcam_video", None)
    assert isinstance(stop, RunStop) and not stop.is_set()
    assert stop.wait(5) and halted(stop).startswith("stopped at this server's limit of 0.2 s per request")
    e = said_by(stop, gr.Error("cancelled after 3 of 3747 windows"))
    assert e.message == (
        "stopped at this server's limit of 0.2 s per request (NSTCAM_MAX_REQUEST_SECONDS): "
        "cancelled after 3 of 3747 windows"
    )
    runs.finish("gradcam_video", None, stop)
    quick = Runs(budget=0.2).start("stylize", None)
    quick.set()  # a Cancel says "cancelled", whatever the budget
    quick.close()
    time.sleep(0.3)
    assert halted(quick) == "cancelled" and said_by(quick, gr.Error("x")).message == "x"
    assert threading.active_count() < 50  # the budgets' timers go with their runs


def test_an_api_cancel_or_a_closed_stream_stops_its_own_sessions_run_at_once():
    """Row 14 of issue 49: the cancel reaches the run before Gradio acts on it (Gradio could not
    close a generator blocked in another thread, so the run went on for another step or more)."""
    import asyncio
    import json
    from types import SimpleNamespace

    from nstcam.app.run.cancels import CancelAtOnce, mark_run

    runs = Runs()
    request = SimpleNamespace
    style = runs.start("stylize", request(session_hash="s1"))
    clip = runs.start("gradcam_video", request(session_hash="s1"))
    other = runs.start("stylize", request(session_hash="s2"))
    fns = {
        3: SimpleNamespace(fn=mark_run(lambda: None, runs, "stylize")),
        4: SimpleNamespace(fn=mark_run(lambda: None, runs, "gradcam_video")),
        5: SimpleNamespace(fn=lambda: None),  # an event that starts no run
    }
    blocks = SimpleNamespace(fns=fns)
    seen = []

    async def app(scope, receive, send):  # Gradio behind: it still gets the whole request
        message = await receive()
        seen.append((scope["path"], message))

    def asgi(scope, messages):
        async def go():
            queue = list(messages)

            async def receive():
                return queue.pop(0)

            await CancelAtOnce(app)(
                {"type": "http", "app": SimpleNamespace(get_blocks=lambda: blocks), **scope}, receive, None
            )

        asyncio.run(go())

    body = json.dumps({"session_hash": "s1", "fn_index": 3, "event_id": "e"}).encode()
    asgi({"method": "POST", "path": "/gradio_api/cancel"}, [{"type": "http.request", "body": body}])
    assert style.is_set() and not clip.is_set() and not other.is_set()  # its own event's run only
    assert seen[-1] == ("/gradio_api/cancel", {"type": "http.request", "body": body, "more_body": False})
    asgi({"method": "POST", "path": "/gradio_api/cancel"}, [{"type": "http.request", "body": b"{bad"}])
    assert not clip.is_set()  # a malformed cancel goes on to Gradio, stopping nothing
    query = {"method": "GET", "path": "/gradio_api/queue/data", "query_string": b"session_hash=s1"}
    asgi(query, [{"type": "http.request", "body": b""}])
    assert not clip.is_set()  # the stream still open
    asgi(query, [{"type": "http.disconnect"}])
    assert clip.is_set() and not other.is_set()  # the session's every run, no other session's


def test_results_gradio_caches_are_removed_by_its_own_timer(tmp_path):
    """Row 9 of issue 49: a file Gradio caches for a request is in a set the app lists, so the
    ``delete_cache`` timer (and SIGTERM's cleanup) removes it; before, outputs were recorded only on
    each session's copies of the components, which nobody reads."""
    from gradio import processing_utils
    from gradio.route_utils import delete_files_created_by_app

    from nstcam.app.disk.cache import CACHED, track_cached_files

    demo = track_cached_files(gr.Blocks())
    assert track_cached_files(demo) is demo and sum(s is CACHED for s in demo.temp_file_sets) == 1
    path = processing_utils.save_bytes_to_cache(b"a result", "result.txt", str(tmp_path))
    assert path in CACHED and Path(path).read_text() == "a result"
    delete_files_created_by_app(demo, age=None)  # what the timer does to files past their age
    assert not Path(path).exists()


ROOT = Path(__file__).resolve().parents[1]


def test_every_endpoint_has_one_cost_estimator_and_the_docs_list_it(models):
    """One helper (``request_cost``) estimates every endpoint's request; docs/security.md's table
    names each endpoint with its estimator."""
    demo = build_demo(models.config, models)
    endpoints = {f.api_name for f in demo.fns.values() if f.api_visibility == "public" and f.api_name}
    queues = {f.concurrency_id for f in demo.fns.values() if f.concurrency_id in ESTIMATES}
    assert endpoints | {"gradcam_volume"} == set(ESTIMATES) and "gradcam_volume" in queues
    table = (ROOT / "docs" / "security.md").read_text().split("## What one request may cost")[1]
    for endpoint, estimate in ESTIMATES.items():
        row = f"| `{endpoint}` | `{estimate.__name__}` |"
        assert row in table, row
    with pytest.raises(ValueError, match="endpoint must be one of stylize, subject_aware"):
        request_cost("nope", models.config)


def _budget(**limits) -> Models:
    return Models(AppConfig(random_weights=True, device="cpu", **limits))


@pytest.mark.parametrize(
    ("endpoint", "call", "said"),
    [
        (
            "gradcam",
            lambda m, c: cam_handler(m, c, "resnet18", "layer4", "scorecam", 3),
            "Score-CAM on resnet18 layer4 (512 channels) with top-k 3 would cost 1,536 masked images "
            "(one per channel and class), over this CPU server's limit of 1,024. Use top-k 2 or less; "
            "or an earlier layer with fewer channels (e.g. layer3, layer3.0, layer3.1); "
            "or another method (each costs about one forward pass).",
        ),
        (
            "faithfulness",  # the map alone fits (512); with the curves' 126 it does not
            lambda m, c: faithfulness_handler(m, c, "resnet18", "layer4", "scorecam"),
            "the faithfulness of Score-CAM on resnet18 layer4 (512 channels) with top-k 1 would cost 638 "
            "masked images (one per channel and class; 126 for the curves), over this CPU server's limit of "
            "600. Use an earlier layer with fewer channels (e.g. layer3, layer3.0, layer3.1); or another "
            "method (each costs about one forward pass).",
        ),
        ("stylize", lambda m, c: stylize_handler(m, c, c, size=600), "size must be between 64 and 512"),
        ("subject_aware", lambda m, c: subject_handler(m, c, c, steps=301), "steps must be between 1 and"),
        ("features", lambda m, c: features_handler(m, c, "vgg16_bn", "", 65), "channels must be between"),
    ],
)
def test_each_endpoint_is_refused_over_its_estimate_before_any_model_is_built(tmp_path, endpoint, call, said):
    budget = 600 if endpoint == "faithfulness" else 1024
    m = _budget(scorecam_budget=budget)
    photo = tmp_path / "photo.png"
    pattern(64).save(photo)
    message, seconds, _ = _refused(call, m, str(photo))
    assert message.startswith(said) and "\n" not in message, message
    assert m._cams == {} and m._nets == {} and m._style is None  # nothing was built
    assert seconds < 2


def test_estimates_count_what_bounds_the_work():
    """Each estimate counts its request's unit: equal to the work the engines do where they count it
    (Score-CAM's progress, the clip's windows, a volume's passes; tested beside each), and monotone in
    every argument that adds work."""
    cfg = AppConfig(random_weights=True, device="cpu", scorecam_budget=1024)
    shared = 66 * 128**2 + 34 * 256**2  # 100 steps shared by the scales, 2:1
    assert request_cost("stylize", cfg, 256, 100).units == shared
    most = request_cost("stylize", cfg, 512, 300).check()  # the largest size and most steps fit exactly
    assert most.units == most.limit == 200 * 256**2 + 100 * 512**2
    assert request_cost("gradcam", cfg, "resnet18", "layer4", 1, "scorecam").units == 512
    assert request_cost("gradcam", cfg, "resnet18", "layer4", 1, "scorecam", True).units == 6 * 512
    assert request_cost("gradcam", cfg, "resnet18", "layer4", 10, "gradcam").units == 0
    assert request_cost("gradcam", cfg, "fasterrcnn_mobilenet_v3_large_fpn", "", 1, "scorecam").units == 0
    assert request_cost("faithfulness", cfg, "resnet18", "layer4", 1, "gradcam").units == 6 * 10 + 66
    assert request_cost("gradcam_video", cfg, "c.mp4", 32, 16, 8).units == 3  # starts 0, 8, 16
    cost = video_cost(cfg, "c.mp4", 34, 256, 170).check()
    assert cost.units == 34 * 256 * 170 <= cost.limit
    with pytest.raises(gr.Error, match=r"c.mp4: 35 frames of 256x170 px would cost 1,523,200 frame pixels"):
        video_cost(cfg, "c.mp4", 35, 256, 170).check()


def test_a_learning_refusal_says_the_most_steps_that_fit_and_the_slider_says_it_too():
    """Issue 88.16: Learn's Steps slider went to 1,000, more than about 244 was refused at the
    defaults, and nothing said the most that fits."""
    import gradio as gr

    from nstcam.app import AppConfig
    from nstcam.app.guard.cost import learn_steps_that_fit, request_cost

    cfg = AppConfig(random_weights=True, device="cpu")
    most = learn_steps_that_fit(cfg, 256, 2)
    assert 200 < most < 300
    request_cost("learn_style", cfg, 256, most, 2).check()  # the most fits
    with pytest.raises(gr.Error, match=f"Use at most {most} steps at 256 px with 2 crops a step"):
        request_cost("learn_style", cfg, 256, most + 1, 2).check()
    assert learn_steps_that_fit(cfg, 64, 1) > learn_steps_that_fit(cfg, 256, 1) > most
