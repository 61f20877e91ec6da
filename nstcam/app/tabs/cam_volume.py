"""The "Explain a volume" tab: a ``.npy`` volume through a 3D model (:meth:`nstcam.GradCAM.explain_volume`),
its map on the volume's own voxels, a slice viewer (a slider over the slices, along any axis) and a
slice grid. The page's only: the volume is kept in the session (``gr.State``) for the slider, which
the API has no use for; the Python API does the same in two calls (``explain_volume``, ``.slice``).

The app's 3D models are Kinetics-400 video classifiers, which take RGB clips: a volume's first
channel is read as a grey clip (:func:`nstcam.cam.volumes.grey_clip`), so its maps show what such a
model reacts to, not what a scan classifier would. A ``.npy`` file is read without pickles, its size
checked from its header (``NSTCAM_MAX_VOLUME_VALUES``) before its data.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import torch
from PIL import Image

from nstcam._choices import one_of
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.inputs import SafeFile
from nstcam.app.guard.limits import VOLUME_MIN_SIDE, VOLUME_TOP_K
from nstcam.app.run import zerogpu
from nstcam.app.run.cancels import mark_run
from nstcam.app.run.listen import for_people
from nstcam.app.run.running import Result, cancel_on, fail, in_thread, said_by, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tools import clip_methods
from nstcam.cam.volumes import VolumeResult, grey_clip, load_volume, volume_header

__all__ = [
    "AXES",
    "Viewed",
    "along",
    "shown_slice",
    "slice_view",
    "tab",
    "volume_handler",
]

AXES = {"depth (D)": 0, "height (H)": 1, "width (W)": 2}
"""The slider's axes, as the page names them."""


PROGRESS = gr.Progress()
"""Gradio's progress tracker (a default of this type asks Gradio for the request's own)."""

PASSES = ("the top classes", "the maps")
"""What each of a volume's two passes does, as the progress bar says it."""

SHOWN = {"slice": 384, "grid": 768}
"""Long side the page shows a slice and the grid at, at least: small volumes are enlarged by a whole
factor, each voxel a square of pixels (nearest), so a 40-voxel slice is not 40 px on screen."""


def _enlarged(img: Image.Image, long_side: int) -> Image.Image:
    factor = max(1, long_side // max(img.size))
    if factor == 1:
        return img
    big = img.resize((img.width * factor, img.height * factor), Image.Resampling.NEAREST)
    big.info.update(img.info)  # where it came from (random weights are said on saving)
    return big


@dataclass(frozen=True)
class Viewed:
    """What the viewer keeps in the session: the first class's result and the axis looked along."""

    result: VolumeResult
    axis: int


def _checked_volume(cfg: AppConfig, path: str) -> torch.Tensor:
    """The upload's volume, its header checked first (kind, size, each side, cost: a file over a
    limit is never read), then its data."""
    name = Path(path).name
    try:
        shape, _ = volume_header(path, name="volume")
    except ValueError as e:
        raise refuse(f"Bad volume: {e}") from None
    if len(shape) in (3, 4):  # another shape is refused by load_volume, naming the shapes it takes
        sides = shape[-3:]
        if min(sides) < VOLUME_MIN_SIDE:
            raise refuse(
                f"Bad volume: {name} is {' x '.join(map(str, sides))} voxels; each side needs at least {VOLUME_MIN_SIDE}"
            )
        request_cost("gradcam_volume", cfg, name, sides, VOLUME_TOP_K).check()
    try:
        return load_volume(path, name="volume", max_values=cfg.max_volume_values)
    except ValueError as e:
        raise refuse(f"Bad volume: {e}") from None


@zerogpu.task
def _explain_volume(models: Models, put: Any, stop: Any, key: tuple[str, str, str], clip: Any) -> Any:
    """A volume's maps (on ZeroGPU in its worker): puts (passes done, passes); ends after the
    current pass once ``stop`` is set."""
    return models.cam(*key).explain_volume(clip, top_k=VOLUME_TOP_K, progress=zerogpu.reporting(put, stop))


def volume_handler(
    models: Models,
    volume: Any,
    model: str = "r3d_18",
    method: str = "gradcam",
    axis: str = "depth (D)",
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[str, str, dict, list[list[Any]], Viewed]:
    """Explains an uploaded ``.npy`` volume. Returns (the middle slice, the slice grid, the slider's
    new range, table rows [rank, class, label, probability], what the viewer keeps). ``progress``:
    as :func:`nstcam.cam.volumes.explain_volume`'s (False stops)."""
    cfg = models.config
    try:
        if volume is None:
            raise refuse("Upload a volume (.npy).")
        one_of("model", model, cfg.volume_archs, also=" on this server", error=refuse)
        one_of("method", method, clip_methods(), error=refuse)
        one_of("axis", axis, AXES, error=refuse)
        name = Path(str(volume)).name
        vol = _checked_volume(cfg, str(volume))
        cam = models.cam(model, "", method)
        clip = grey_clip(vol, cam.preprocessing.mean, cam.preprocessing.std)
        cost = request_cost("gradcam_volume", cfg, name, tuple(vol.shape), VOLUME_TOP_K)
        stop = threading.Event()
        results = zerogpu.call(
            _explain_volume,
            models,
            stop,
            zerogpu.gpu_seconds(cost, cfg),
            zerogpu.answered_by(progress, stop),
            key=(model, "", method),
            clip=clip,
        )
    except Exception as e:
        raise fail(e) from e
    # the session keeps one grey channel (what slices draw), not the model's three: 16 MB at 128^3
    first = dataclasses.replace(results[0], volume=np.ascontiguousarray(results[0].volume[:1]))
    viewed = Viewed(first, AXES[axis])
    depth = results[0].depths[viewed.axis]
    middle = depth // 2
    out = models.outbox
    grid = out.save(
        _enlarged(results[0].slices(axis=viewed.axis), SHOWN["grid"]), f"{Path(name).stem}_slices.png"
    )
    mark = " (random weights)" if results[0].weights and results[0].weights.is_random else ""
    rows = [[i + 1, r.index, r.label + mark, round(r.score, 4)] for i, r in enumerate(results)]
    slider = gr.update(minimum=0, maximum=depth - 1, value=middle, interactive=True, visible=True)
    return slice_view(models, viewed, middle), grid, slider, rows, viewed


def slice_view(models: Models, viewed: Viewed | None, index: Any) -> str | None:
    """Slice ``index`` of the explained volume with its map (None before a volume is explained)."""
    if viewed is None:
        return None
    depth = viewed.result.depths[viewed.axis]
    check(index if isinstance(index, (int, float)) else None, "index", 0, depth - 1)
    img = _enlarged(viewed.result.slice(int(index), axis=viewed.axis), SHOWN["slice"])
    return models.outbox.save(img, f"slice_{int(index)}.png")


def along(models: Models, viewed: Viewed | None, axis: str) -> tuple[Any, Any, Any, Any]:
    """The explained volume seen along ``axis`` (the "Slice along" choice, after explaining): its
    middle slice, its slice grid, the slider's range and the session's new view; the model does not
    run again. Before a volume is explained, nothing changes."""
    if viewed is None or axis not in AXES or AXES[axis] == viewed.axis:
        return gr.skip(), gr.skip(), gr.skip(), gr.skip()
    turned = Viewed(viewed.result, AXES[axis])
    depth = turned.result.depths[turned.axis]
    grid = _enlarged(turned.result.slices(axis=turned.axis), SHOWN["grid"])
    slider = gr.update(minimum=0, maximum=depth - 1, value=depth // 2, interactive=True, visible=True)
    shown = slice_view(models, turned, depth // 2)
    return shown, models.outbox.save(grid, f"slices_{axis.split()[0]}.png"), slider, turned


def shown_slice(models: Models, viewed: Viewed | None, index: Any) -> tuple[Any, Any]:
    """The slice view for the slider's value, and the slider's value where it was past an end of the
    volume's slices (typed in its box), set to that end (else left as it is)."""
    if viewed is None:
        return None, gr.skip()
    if not isinstance(index, (int, float)) or isinstance(index, bool):  # the gate lets only numbers by
        raise refuse(f"index must be a number, got {type(index).__name__}")
    depth = viewed.result.depths[viewed.axis]
    at = min(max(int(index), 0), depth - 1)
    return slice_view(models, viewed, at), (gr.update(value=at) if at != index else gr.skip())


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Explain a volume" tab (the page's only: no API endpoint)."""
    side = round(config.max_volume_values ** (1 / 3))
    gr.Markdown(
        f"A volume (`.npy`, C x D x H x W or D x H x W; at most {config.max_volume_values:,} values, "
        f"about {side}³) through a 3D model, then a slider through its slices. This server's 3D models "
        "are video classifiers (Kinetics-400): a volume's first channel is read as a grey clip, so the "
        "maps show what such a model reacts to. For a scan classifier of your own, use "
        "`GradCAM(model=...).explain_volume` in Python." + weights_note(config.random_weights),
        elem_id="camvol-about",
    )
    with gr.Row():
        with gr.Column(scale=1):
            volume = SafeFile("volume", label="Volume (.npy)", file_types=[".npy"], elem_id="camvol-input")
            arch = gr.Dropdown(
                list(config.volume_archs), value="r3d_18", label="Model", elem_id="camvol-model"
            )
            method = gr.Dropdown(
                list(clip_methods()), value="gradcam", label="Method", elem_id="camvol-method"
            )
            axis = gr.Radio(list(AXES), value="depth (D)", label="Slice along", elem_id="camvol-axis")
            with gr.Row():
                run = gr.Button("Explain volume", variant="primary", elem_id="camvol-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="camvol-cancel")
            status = gr.Markdown(elem_id="camvol-status")
        with gr.Column(scale=2):
            view, index, grid, table = _viewer(config)
    viewed = gr.State(None, time_to_live=1800)  # an explained volume, kept 30 minutes at most

    def explain(
        volume: Any,
        model: str,
        method: str,
        axis: str,
        request: gr.Request,
        progress: gr.Progress = PROGRESS,
    ) -> Iterator[tuple]:
        stop = runs.start("volume", request)  # Cancel, a closed page, the server's time budget
        skip = (gr.skip(),) * 5

        def work(put: Callable[[Any], None]) -> tuple:
            def report(done: int, total: int) -> bool:
                put((done, total))  # said from the request's thread: Gradio's tracker lives there
                return not stop.is_set()

            return volume_handler(models, volume, model, method, axis, progress=report)

        progress(0.0, desc="starting: loading the model and the volume…")
        yield skip
        try:
            for done, total in (res := Result(in_thread(work, stop))):
                progress(done / total, desc=f"pass {done}/{total}: {PASSES[done - 1]}")
                yield skip
        except gr.Error as e:  # the handler says every error as one
            raise said_by(stop, e) from None
        finally:
            runs.finish("volume", request, stop)
        yield res.value

    mark_run(explain, runs, "volume")  # an API cancel or a closed page stops it at once
    outputs = [view, grid, index, table, viewed, status]
    run.click(
        for_people(
            explain,
            5,
            5,
            True,
            lambda _v, model, method, *_: (
                f"Explained with {model}, method {method}." + weights_note(config.random_weights)
            ),
        ),
        [volume, arch, method, axis],
        outputs,
        api_name=False,
        concurrency_id="gradcam_volume",
    )
    cancel_on(cancel, runs, "volume")
    index.change(  # a number typed past an end shows the end slice; the view never turns to an error
        lambda viewed, index: shown_slice(models, viewed, index),
        [viewed, index],
        [view, index],
        api_name=False,
        trigger_mode="always_last",
        preprocess=False,  # the value as sent: Gradio's own check against the narrowed range would raise
    )
    axis.change(  # after explaining: the same maps along another axis, the model not run again
        lambda viewed, axis: along(models, viewed, axis),
        [viewed, axis],
        [view, grid, index, viewed],
        api_name=False,
    )


def _viewer(config: AppConfig) -> tuple[Any, Any, Any, Any]:
    """The right column: a slice, the slider through the slices, the slice grid, the top classes."""
    view = gr.Image(label="Slice", type="filepath", interactive=False, elem_id="camvol-slice")
    # its range here is the largest any volume may need (the request gate checks against it);
    # an explained volume narrows it to its own slices, which slice_view checks
    most = config.max_volume_values // VOLUME_MIN_SIDE**2 - 1
    index = gr.Slider(
        0,
        most,
        value=0,
        step=1,
        label="Slice",
        interactive=False,
        visible=False,  # shown with an explained volume's own range (not 0-32767 before any)
        elem_id="camvol-index",
    )
    grid = gr.Image(label="Slice grid", type="filepath", interactive=False, elem_id="camvol-grid")
    table = gr.Dataframe(headers=["rank", "class", "label", "probability"], label="Top classes")
    return view, index, grid, table
