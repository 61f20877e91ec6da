"""The "Explain a clip" tab: a clip explained over time (:meth:`nstcam.GradCAM.explain_video`), the
overlay clip, the class scores over time and a contact sheet; its handler, layout and
``/gradcam_video`` endpoint. The Video tab's limits and media checks apply."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from nstcam._choices import one_of
from nstcam._mark import tag_weights
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse, sentence
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.inputs import SafeVideo
from nstcam.app.guard.shapes import MAX_ASPECT, check_aspect
from nstcam.app.plots import scores_figure
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, in_thread, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tools import clip_methods, fill_doc
from nstcam.video import VideoError, check_limits, probe_video

__all__ = ["CLIP_METHODS", "DOC", "cam_video_handler", "clip_limits_text", "tab"]

CLIP_METHODS = clip_methods()
"""Methods the tab offers on clips (:func:`nstcam.app.tools.clip_methods`)."""

DOC = """Grad-CAM over time: which pixels of which frames made a video classifier (R3D, R(2+1)D, MC3; on a GPU
also S3D, MViT, Swin3D; Kinetics-400's actions) decide, or an image classifier frame by frame. The clip
is read in windows of the model's length (16 frames), each explained and placed back on its frames.
Costs about two forward passes and one backward pass per window and class. Clips longer than
{video_seconds:g} s are refused unless `trim` is true. Results from random weights are labelled as such.

Args:
    video: the clip (mp4, webm, mov, mkv or GIF; at most {upload} MB) as an http(s) URL or a data: URL.
    model: one of {clip_archs} (default r3d_18; an image classifier explains each frame alone).
    method: one of {clip_methods} (default gradcam).
    top_k: how many of the clip's top classes to explain, 1 to 5 (the overlay shows the first).
    stride: frames between windows, 0 (default: half a window) to 16.
    smooth: average each frame's map with this many frames on each side, 0 (default) to 10.
    max_seconds: explain at most this many seconds from the start (0: the server's limit).
    trim: true: a clip over the limit is cut to what fits; false: it is refused with the limit.

Returns:
    result_video: the clip with the first class's heatmap over each frame, its label, score and time in a margin below each frame (mp4, the input's audio).
    scores: a plot of each class's probability over time, its strongest window shaded.
    contact_sheet: 8 frames with each class's heatmap, one row per class.
    top_classes: a table of rank, class index, label, mean probability and the frames where it is strongest.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


HEADERS = ("rank", "class", "label", "probability", "peak frames")
"""The table's columns (short: the table fits beside the clip at a 1400 px viewport)."""


def clip_limits_text(cfg: AppConfig) -> str:
    """The limits of a clip to explain, as the tab states them before any upload."""
    return (
        f"Clips up to {cfg.max_video_seconds:g} s and {cfg.max_video_frames:,} frames, whatever their rate; "
        f"source frames up to {cfg.max_frame_pixels / 1e6:.1f} MP and at most {MAX_ASPECT:g}:1; uploads up to "
        f"{cfg.max_upload_mb:g} MB. A longer clip is refused, or cut to its start if you tick Trim."
    )


@zerogpu.task
def _explain_clip(
    models: Models, put: Any, stop: Any, key: tuple[str, str, str], info: Any, **options: Any
) -> Any:
    """A clip explained window by window (on ZeroGPU in its worker): puts (windows done, windows);
    ends after the current window once ``stop`` is set."""
    return models.cam(*key).explain_video(info, progress=zerogpu.reporting(put, stop), **options)


def cam_video_handler(
    models: Models,
    video: Any,
    model: str = "r3d_18",
    method: str = "gradcam",
    top_k: int = 3,
    stride: int = 0,
    smooth: int = 0,
    max_seconds: float = 0.0,
    trim: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[str, str, str, list[list[Any]]]:
    """Returns (overlay clip, score plot, contact sheet, table rows [rank, class, label, p, frames])."""
    cfg = models.config
    try:
        if video is None:
            raise refuse("Upload a clip.")
        one_of("model", model, cfg.clip_archs, also=" on this server", error=refuse)
        one_of("method on a clip", method, CLIP_METHODS, error=refuse)
        check(top_k, "top_k", 1, 5)
        check(stride, "stride", 0, 16)
        check(smooth, "smooth", 0, 10)
        check(max_seconds, "max_seconds", 0, 1e6)
        path = str(video)
        name = Path(path).name  # Gradio keeps the upload's own name
        # refused before any model loads; the frames counted up to the limit, whatever their rate
        info = probe_video(path, name=name, max_pixels=cfg.max_frame_pixels, max_frames=cfg.max_video_frames)
        check_aspect(name, (info.width, info.height), "a clip whose frames")
        seconds = cfg.max_video_seconds if not max_seconds else min(float(max_seconds), cfg.max_video_seconds)
        frames = check_limits(  # the decoded frame count, before any model loads
            info, max_seconds=seconds, max_frames=cfg.max_video_frames, trim=bool(trim) or bool(max_seconds)
        )
        cam = models.cam(model, "", method)
        window = cam.frames or 1
        cost = request_cost(
            "gradcam_video",
            cfg,
            name,
            frames,
            window,
            int(stride) or max(1, window // 2),
            model,
            (info.width, info.height),
        ).check()  # windows planned, each at its frame's pixels
        stem = Path(path).stem
        out = models.outbox
        stop = threading.Event()  # the API's Cancel reaches the engine through progress's answer
        result = zerogpu.call(
            _explain_clip,
            models,
            stop,
            zerogpu.gpu_seconds(cost, cfg),
            zerogpu.answered_by(progress, stop),
            key=(model, "", method),
            info=info,
            top_k=int(top_k),
            stride=int(stride) or None,
            smooth=int(smooth),
            max_seconds=seconds,
            max_frames=cfg.max_video_frames,
            trim=bool(trim) or bool(max_seconds),
            output=out.reserve(f"{stem}_cam.mp4"),
            contact_sheet=out.reserve(f"{stem}_sheet.png"),
        )
    except VideoError as e:
        hint = " Tick Trim to explain the start of the clip." if e.trimmable and not trim else ""
        raise fail(refuse(f"Bad video: {sentence(str(e))}{hint}")) from None
    except Exception as e:
        raise fail(e) from e
    mark = " (random weights)" if result.random_weights else ""
    plot = out.save(tag_weights(scores_figure(result), result.notice, result.random_weights), "scores.png")
    rows = [
        [i + 1, c.index, c.label + mark, round(c.score, 4), f"{c.peak[0]}-{c.peak[1]}"]
        for i, c in enumerate(result.classes)
    ]
    return str(result.output), plot, str(result.contact_sheet), rows


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Explain a clip" tab and its ``/gradcam_video`` endpoint."""
    gr.Markdown(clip_limits_text(config), elem_id="camv-limits")
    with gr.Row():
        with gr.Column(scale=1):
            video = SafeVideo(label="Clip", sources=["upload"], include_audio=True, elem_id="camv-input")
            arch = gr.Dropdown(
                list(config.clip_archs),
                value="r3d_18",
                label="Model",
                elem_id="camv-model",
                info="video classifiers (Kinetics-400), then image classifiers frame by frame",
            )
            method = gr.Dropdown(list(CLIP_METHODS), value="gradcam", label="Method", elem_id="camv-method")
            top_k = gr.Slider(1, 5, value=3, step=1, label="Top-k classes")
            with gr.Row():
                stride = gr.Slider(0, 16, value=0, step=1, label="Stride (0: half a window)")
                smooth = gr.Slider(0, 10, value=0, step=1, label="Smooth over frames")
            with gr.Row():
                max_seconds = gr.Number(0, label="Max seconds (0 = server limit)", minimum=0)
                trim = gr.Checkbox(False, label="Trim a clip over the limit to its start")
            with gr.Row():
                run = gr.Button("Explain clip", variant="primary", elem_id="camv-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="camv-cancel")
            status = gr.Markdown(elem_id="camv-status")
        with gr.Column(scale=2):
            result = gr.Video(label="Explained clip", interactive=False, elem_id="camv-result")
            plot = gr.Image(label="Score over time", type="filepath", interactive=False, elem_id="camv-plot")
            sheet = gr.Image(label="Contact sheet", type="filepath", interactive=False, elem_id="camv-sheet")
            table = gr.Dataframe(  # wrapped, its widths set: "peak frames" was cut at 1400 px
                headers=list(HEADERS),
                label="Top classes",
                wrap=True,
                column_widths=["10%", "14%", "36%", "17%", "23%"],
                elem_id="camv-table",
            )

    @endpoint(cam_video_handler, fill_doc(DOC, config), runs=(runs, "gradcam_video"), progress=True)
    def gradcam_video(stop: threading.Event, progress: gr.Progress, **params: Any) -> Iterator[tuple]:
        progress(0.0, desc="starting: loading the model and the clip…")

        def work(put: Any) -> Any:
            def report(done: int, total: int) -> bool:
                put((done, total))  # said from the request's thread: Gradio's tracker lives there
                return not stop.is_set()  # Cancel: the engine stops after this window

            return cam_video_handler(models, **params, progress=report)

        yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            for done, total in (res := Result(in_thread(work, stop))):
                progress(done / total, desc=f"window {done}/{total}")
                yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
        except Exception as e:
            raise fail(e) from e
        clip, figure, contact, rows = res.value
        yield clip, figure, contact, {"headers": list(HEADERS), "data": rows}

    listen(
        run,
        gradcam_video,
        [video, arch, method, top_k, stride, smooth, max_seconds, trim],
        [result, plot, sheet, table],
        status,
        api_name="gradcam_video",
        done=lambda _video, model, method, *_: (
            f"Explained with {model}, method {method}." + weights_note(config.random_weights)
        ),
    )
    cancel_on(cancel, runs, "gradcam_video")
