"""The app's "Video" tab: a clip stylised frame by frame without flicker, the frame so far streaming
as a preview, Cancel writing the frames done as a playable clip; limits stated before any work."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse, sentence
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import FAST_VIDEO_FACTOR, request_cost, style_cost
from nstcam.app.guard.inputs import SafeFile, SafeImage, SafeVideo, load_upload, warn_bad_uploads
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, halted, in_thread, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tabs.style import STARTING
from nstcam.app.tools import fill_doc
from nstcam.fast import LearnedStyle
from nstcam.image import long_side_size
from nstcam.video import (
    DEFAULT_TEMPORAL_WEIGHT,
    TEMPORAL_WEIGHT_RANGE,
    VideoError,
    VideoResult,
    check_limits,
    even_size,
    probe_video,
)

__all__ = ["DOC", "limits_text", "tab", "video_handler"]

logger = logging.getLogger(__name__)


DOC = """Video style transfer without flicker (Ruder et al. 2016): every frame of the clip repainted
in the style, each started from the previous stylised frame warped by the optical flow and held to
it where the motion is certain. Costs about `steps` network evaluations per frame ({cost}).
Clips longer than {video_seconds:g} s or over {video_pixels:,} frame pixels (frames x width x height at
`size`) are refused unless `trim` is true. Results from random weights are labelled as such.

Args:
    video: the clip (mp4, webm, mov, mkv or GIF; at most {upload} MB) as an http(s) URL or a data: URL.
    style: the painting or texture whose style is transferred: {image}; null with a style_file.
    size: long side of the frames in px, 64 to {max_size}.
    steps: optimisation steps per frame, 1 to {max_steps}.
    temporal_weight: weight of the temporal loss, {temporal_range} (default 50; 0: every frame alone, flickers).
    max_seconds: stylise at most this many seconds from the start (0: the server's limit).
    trim: true: a clip over the limits is cut to what fits; false: it is refused with the limits.
    seed: random seed, >= 0.
    fast: true: each frame painted in one pass of a pretrained network (Magenta's arbitrary style network, real weights whatever the VGG's; `steps` and `temporal_weight` unused), steadied by blending the previous frame warped along the flow: a fraction of a second per frame.
    style_file: with fast true: a learned style (.safetensors, from /learn_style) instead of `style`; or null.

Returns:
    preview: the last frame stylised.
    status: "done: N frames ... warping error E" (lower is steadier), or why it stopped.
    result_video: the stylised clip (H.264 mp4, the input's frame rate and audio).
    download_mp4: the same clip as a file to download.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


def frame_pixel_limit(cfg: AppConfig, fast: bool) -> int:
    """Frames x width x height one clip may cost: the server's limit, :data:`FAST_VIDEO_FACTOR` times
    it in the fast mode."""
    return int(cfg.max_video_pixels * (FAST_VIDEO_FACTOR if fast else 1))


def limits_text(cfg: AppConfig) -> str:
    """The video limits, as the tab states them before any upload: what fits at a few sizes, in
    each mode (a clip is never upscaled: a smaller clip keeps its own size)."""
    fits = []
    for side in (128, 256, 512):
        if side > cfg.max_size:
            continue
        w, h = side, side * 9 // 16  # a 16:9 clip
        secs = [min(cfg.max_video_frames, frame_pixel_limit(cfg, f) // (w * h)) / 30 for f in (False, True)]
        secs = [min(cfg.max_video_seconds, t) for t in secs]
        fits.append(f"{w}x{h} px: {secs[0]:.3g} s (Optimise), {secs[1]:.3g} s (Fast)")
    return (
        f"What fits at 30 frames/s: {'; '.join(fits)}. Limits: {cfg.max_video_seconds:g} s and "
        f"{cfg.max_video_frames:,} frames a clip, source frames up to {cfg.max_frame_pixels / 1e6:.1f} MP, "
        f"uploads up to {cfg.max_upload_mb:g} MB; a clip smaller than the size asked keeps its own. "
        "A longer clip is refused with what fits, or cut to its start if you tick Trim."
    )


def _plan_frames(
    cfg: AppConfig, path: str, size: int, max_seconds: float, trim: bool, fast: bool = False
) -> tuple[Any, int, Any]:
    """The probed clip, how many frames to stylise and what they cost (at ``size``, never above the clip's own long
    side), or a refusal naming the file and the limit (the fast mode's: :func:`frame_pixel_limit`)."""
    name = Path(path).name  # Gradio keeps the upload's own name
    try:
        info = probe_video(path, name=name, max_pixels=cfg.max_frame_pixels, max_frames=cfg.max_video_frames)
    except (VideoError, FileNotFoundError) as e:
        raise refuse(f"Bad video: {sentence(str(e))}") from None
    seconds = cfg.max_video_seconds if not max_seconds else min(float(max_seconds), cfg.max_video_seconds)
    try:
        side = min(int(size), max(info.width, info.height))  # never upscaled
        dims = even_size(long_side_size((info.width, info.height), side), "x.mp4")
        n = check_limits(
            info,
            max_seconds=seconds,
            max_frame_pixels=frame_pixel_limit(cfg, fast),
            frame_size=dims,
            max_frames=cfg.max_video_frames,
            trim=bool(trim) or bool(max_seconds),
        )
    except VideoError as e:
        hint = " Tick Trim to stylise the start of the clip." if e.trimmable and not trim else ""
        raise refuse(f"Bad video: {sentence(str(e))}{hint}") from None
    cost = request_cost(
        "stylize_video", cfg, name, n, *dims, fast=fast
    ).check()  # within the limit once trimmed
    return info, n, cost


@zerogpu.task
def _clip(
    models: Models, put: Any, stop: Any, fast: bool, info: Any, style: Any, out: Path, **options: Any
) -> Any:
    """The clip stylised into ``out`` (on ZeroGPU in its worker): puts each frame's progress (a
    finished frame's picture among it); ends after the current step once ``stop`` is set."""

    def on_frame(f: Any) -> bool:
        put(f)
        return not stop.is_set()

    st = models.fast() if fast else models.style()
    return st.stylize_video(info, style, out, progress=on_frame, progress_bar=False, **options)


def video_handler(
    models: Models,
    video: Any,
    style: Any = None,
    size: int = 256,
    steps: int = 50,
    temporal_weight: float = DEFAULT_TEMPORAL_WEIGHT,
    max_seconds: float = 0.0,
    trim: bool = False,
    seed: int = 0,
    stop: threading.Event | None = None,
    fast: bool = False,
    style_file: Any = None,
) -> Iterator[tuple[str | None, str, str | None]]:
    """Streams (frame preview, status, video path) while stylising a clip; the last item has the
    video. Each frame done comes as a PNG file of its own (None while a frame's steps run: the
    preview stays). ``stop`` (Cancel) ends the run after the current step: the frames done are
    written. ``fast``: the pretrained network paints each frame (:meth:`nstcam.FastStyle.stylize_video`),
    with a learned style (``style_file``, from the Learn a style tab) instead of ``style`` if given."""
    cfg = models.config
    stop = stop or threading.Event()
    try:
        if style_file is not None and not fast:
            raise refuse("style_file: a learned style paints in the fast mode only; tick Fast")
        if video is None or (style is None and style_file is None):
            raise refuse("Upload a video and a style image.")
        style_cost(cfg, size, steps).check()  # its size and steps, as a style request's
        check(temporal_weight, "temporal_weight", *TEMPORAL_WEIGHT_RANGE)
        check(max_seconds, "max_seconds", 0, 1e6)
        info, n, cost = _plan_frames(
            cfg, str(video), int(size), float(max_seconds or 0), bool(trim), bool(fast)
        )
        style_img = LearnedStyle.load(Path(str(style_file))) if style_file else load_upload(style, "style")
        st = models.fast() if fast else models.style()
    except Exception as e:
        raise fail(e) from e
    note = "" if fast else weights_note(st.weights.is_random)
    out = models.outbox.reserve(f"{Path(str(video)).stem}_stylized.mp4")
    trimmed = f" (the first {n} of {info.frames})" if n < info.frames else ""
    gone = threading.Event()  # the request was closed (a dropped connection): nobody gets the clip

    def run(put: Callable[[Any], None]) -> VideoResult:
        try:
            return paint(put)
        finally:
            if gone.is_set():
                _discard(out)  # a clip nobody asked for any more: never left in the results folder

    def paint(put: Callable[[Any], None]) -> VideoResult:
        def on_frame(f: Any) -> None:
            if f.done:  # a file of its own per frame: Gradio would rewrite one file while it is served
                frame = models.outbox.save(f.preview, f"frame_{f.frame:05d}.png")
                put((frame, f"frame {f.frame}/{f.frames} done · {f.elapsed:.0f} s"))
            else:
                put((None, f"frame {f.frame}/{f.frames} · step {f.step}/{f.steps}"))

        options = dict(size=int(size), max_frames=n)
        if not fast:
            options.update(steps=int(steps), seed=int(seed), temporal_weight=float(temporal_weight))
        seconds = zerogpu.gpu_seconds(cost, cfg)
        return zerogpu.call(
            _clip, models, stop, seconds, on_frame, fast=fast, info=info, style=style_img, out=out, **options
        )

    try:
        yield None, f"{STARTING} {n} frames{trimmed}" + note, None
        for preview, status in (result := Result(in_thread(run, stop))):
            yield preview, status + note, None
    except GeneratorExit:
        gone.set()
        _discard(out)  # the worker discards it too, when it stops after its current frame
        raise
    except Exception as e:
        _discard(out)
        raise fail(e) from e
    res: VideoResult = result.value
    err = res.warping_error_text + (" (lower is steadier)" if res.warping_error is not None else "")
    head = (
        f"{halted(stop)} after frame {res.frames}/{n}"
        if res.cancelled
        else f"done: {res.frames} frames{trimmed}"
    )
    how = ", fast network (real weights)" if fast else ""
    if res.random_weights and fast:
        how += ", its style learned on RANDOM VGG weights: not meaningful"
    status = (
        f"{head}, {res.size[0]}x{res.size[1]} at {res.fps:g} fps in {res.seconds:.0f} s{how}; warping error {err}"
        + note
    )
    yield None, status, str(res.path)


def _discard(path: Path) -> None:
    """Removes an unfinished clip and its folder (the results folder keeps only delivered files)."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # not empty, or gone already


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Video" tab and its ``/stylize_video`` endpoint."""
    gr.Markdown(limits_text(config), elem_id="vid-limits")
    with gr.Row():
        with gr.Column():
            with gr.Row():
                video = SafeVideo(
                    label="Clip",
                    sources=["upload", "webcam"],
                    include_audio=True,
                    elem_id="vid-input",
                )
                style = SafeImage(
                    label="Style", sources=["upload", "clipboard"], height=220, elem_id="vid-style"
                )
            with gr.Row():
                run = gr.Button("Stylise video", variant="primary", elem_id="vid-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="vid-cancel")
            size = gr.Slider(64, config.max_size, value=min(256, config.max_size), step=16, label="Size (px)")
            steps = gr.Slider(
                1, config.max_steps, value=min(50, config.max_steps), step=1, label="Steps per frame"
            )
            temporal = gr.Slider(
                *TEMPORAL_WEIGHT_RANGE,
                value=DEFAULT_TEMPORAL_WEIGHT,
                step=5,
                label="Temporal weight",
                info="holds each frame to the previous one where the motion is certain; 0: every frame alone",
            )
            with gr.Row():
                max_seconds = gr.Number(0, label="Max seconds (0 = server limit)", minimum=0)
                trim = gr.Checkbox(False, label="Trim a clip over the limits to its start")
            seed = gr.Number(0, label="Seed", precision=0, minimum=0)
            fast = gr.Checkbox(
                False,
                label="Fast: a pretrained network, a fraction of a second per frame (real weights)",
                info="steps and temporal weight are not used; frames are steadied along the optical flow",
                elem_id="vid-fast",
            )
            style_file = SafeFile(
                "style file",
                label="Fast: or a learned style (.safetensors, from Learn a style)",
                file_types=[".safetensors"],
                elem_id="vid-style-file",
            )
        with gr.Column():
            preview = gr.Image(
                label="Frame so far", type="filepath", interactive=False, elem_id="vid-preview"
            )
            status = gr.Textbox(label="Status", interactive=False, elem_id="vid-status")
            result = gr.Video(label="Result", interactive=False, elem_id="vid-result")
            download = gr.File(label="Download MP4", elem_id="vid-download")

    warn_bad_uploads([(style, "style")], status)

    @endpoint(
        video_handler, fill_doc(DOC, config, temporal_range=TEMPORAL_WEIGHT_RANGE), runs=(runs, "video")
    )
    def stylize_video(stop: threading.Event, **params: Any) -> Iterator[tuple[Any, str, Any, Any]]:
        frame = None  # every output a file path or None, as the API says: the last frame repeated
        for image, text, path in video_handler(models, **params, stop=stop):
            frame = image or frame
            yield frame, text, path, path

    listen(
        run,
        stylize_video,
        [video, style, size, steps, temporal, max_seconds, trim, seed, fast, style_file],
        [preview, status, result, download],
        status,
        api_name="stylize_video",
        trigger_mode="always_last",
    )

    cancel_on(cancel, runs, "video")
