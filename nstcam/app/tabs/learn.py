"""The "Learn a style" tab: a painting learned as a new instant style for the Fast mode
(:meth:`nstcam.FastStyle.learn`, the style engine's hooked VGG loss teaching the arbitrary network's
style parameters), with a live preview, Cancel, and the style file to download; its ``/learn_style``
endpoint with the tool doc. The request's cost is checked before any work (:func:`learn_cost`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check, check_picture
from nstcam.app.guard.cost import MAX_LEARN_BATCH, learn_steps_that_fit, request_cost
from nstcam.app.guard.inputs import SafeFiles, SafeImage, load_upload, warn_bad_uploads
from nstcam.app.guard.limits import LEARN_CONTENT_WEIGHTS, MAX_LEARN_PHOTOS
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, halted, in_thread, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tools import fill_doc
from nstcam.app.widgets import as_files, sample
from nstcam.fast import LearnCancelled, LearnStep

__all__ = ["DOC", "PREVIEW_SIZE", "learn_handler", "tab"]

PREVIEW_SIZE = 256
"""Long side of the live preview: the style so far on the first photo."""
PREVIEW_PHOTO = "chelsea.png"
"""The preview's photo when none are uploaded (one of the bundled training photos)."""

DOC = """Learns a painting as a new instant style for the "fast" mode of /stylize: the arbitrary
network's style parameters (694 numbers), from its own prediction for the painting, trained on this
server's VGG loss over random crops of the photos (the bundled sample photos when none are sent).
Costs crop side² x steps x batch pixel-steps, at most <max_learn_minutes> minutes of a 2-core CPU's
work on this {device} server (about 245 steps of two 256 px crops); refused over it before any work.

Args:
    painting: the painting or texture to learn: {image}.
    photos: optional list of up to <max_photos> photos to crop from (each {image}); or null: the bundled ones.
    size: the crops' side in px, 64 to <max_learn_size> (256 is the measured default).
    steps: training steps, each one batch of crops; more is closer to the painting.
    batch: crops per step, 1 to <max_batch>.
    seed: random seed, >= 0; the same inputs and seed give the same style, bit for bit on a CPU.
    content_weight: the loss' content weight, <min_cw> to <max_cw> (default 1: moves furthest toward the painting; 2: keeps more of each photo's subject and moves less).

Returns:
    preview: the style so far on the first photo (<preview> px), every few steps.
    status: "step k/N · loss L", then "done: N steps in S s, loss A -> B" (or why it stopped).
    style_file: the learned style (.safetensors, a few KB): send it as style_file to /stylize with mode "fast".
"""
"""The endpoint's docstring, this server's limits filled in."""


def _count(photos: Any) -> int | None:
    """How many training photos a request sends (at most :data:`MAX_LEARN_PHOTOS`; None: none, the
    bundled ones), before any is read."""
    if not photos:
        return None
    n = len(photos) if isinstance(photos, (list, tuple)) else 1
    if n > MAX_LEARN_PHOTOS:
        raise refuse(f"photos: {n} sent, at most {MAX_LEARN_PHOTOS} on this server")
    return n


def _listed(photos: Any) -> list[Any]:
    if _count(photos) is None:
        return []
    return list(photos) if isinstance(photos, (list, tuple)) else [photos]


def _check_pictures(cfg: AppConfig, painting: Any, photos: Any) -> None:
    """Every upload's shape from its header, before any is decoded: at most the server's frame
    pixels (:attr:`AppConfig.max_frame_pixels`) and :data:`nstcam.app.guard.shapes.MAX_ASPECT`."""
    check_picture(painting, "painting", cfg.max_frame_pixels)
    for k, p in enumerate(_listed(photos), 1):
        check_picture(p, f"photo {k}", cfg.max_frame_pixels)


def _photos(photos: Any) -> list[Image.Image] | None:
    """The uploaded training photos read and checked (:func:`_count` first), or None."""
    listed = _listed(photos)
    return [load_upload(p, f"photo {k}") for k, p in enumerate(listed, 1)] or None


@zerogpu.task
def _learn(
    models: Models, put: Any, stop: Any, art: Any, shots: Any, photo: Any, every: int, **options: Any
) -> Any:
    """The style learned (on ZeroGPU in its worker): puts (preview, status) every step, the preview
    repainted every ``every`` steps; returns (style, its preview, seconds), or the
    ``LearnCancelled`` of a run stopped early."""
    fast, t0 = models.fast(), time.perf_counter()
    last: list[Image.Image | None] = [None]

    def on_step(s: LearnStep) -> bool:
        if s.step % every == 0 or s.step == s.steps or s.step == 1:
            last[0] = fast.stylize(photo, s.style, size=PREVIEW_SIZE)
        put((last[0], f"step {s.step}/{s.steps} · loss {s.loss:.4g} · {s.seconds:.0f} s"))
        return not stop.is_set()

    try:
        learned = fast.learn(
            art, shots, engine=models.style(), callback=on_step, progress_bar=False, **options
        )
    except LearnCancelled as c:
        return c
    return learned, fast.stylize(photo, learned, size=PREVIEW_SIZE), time.perf_counter() - t0


def learn_handler(
    models: Models,
    painting: Any,
    photos: Any = None,
    size: int = 256,
    steps: int = 100,
    batch: int = 2,
    seed: int = 0,
    content_weight: float = 1.0,
    preview_every: int = 10,
    stop: threading.Event | None = None,
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """Streams (preview, status, style file path) while learning ``painting``; the last item is the
    result. The cost is checked, then every upload read, before any work. Setting ``stop`` (Cancel,
    or the server's time budget) ends the run at its next step with no file; the run also ends by
    itself, with its style, shortly before the server's time budget (:attr:`max_request_seconds`)."""
    cfg, stop = models.config, stop or threading.Event()
    try:
        if painting is None:
            raise refuse("Upload a painting to learn.")
        cost = request_cost("learn_style", cfg, size, steps, batch, _count(photos)).check()
        check(seed, "seed", 0, 2**31 - 1)
        check(content_weight, "content_weight", *LEARN_CONTENT_WEIGHTS)
        _check_pictures(cfg, painting, photos)
        art = load_upload(painting, "painting")
        shots = _photos(photos)
        models.fast()  # loaded here (once per process), not in the worker
        engine = models.style()
    except Exception as e:
        raise fail(e) from e
    note = weights_note(engine.weights.is_random)
    photo = (shots or [load_upload(sample(PREVIEW_PHOTO), "photo")])[0]
    every = max(1, int(preview_every))

    seconds = zerogpu.gpu_seconds(cost, cfg)
    options = dict(
        size=int(size),
        steps=int(steps),
        batch=int(batch),
        seed=int(seed),
        minutes=0.95 * cfg.max_request_seconds / 60,  # ends with its style before the budget
        name=_own_name(painting),
        content_weight=float(content_weight),
    )

    def run(put: Callable[[Any], None]) -> Any:
        return zerogpu.call(
            _learn, models, stop, seconds, put, art=art, shots=shots, photo=photo, every=every, **options
        )

    yield None, "starting: reading the painting's style and the photos' crops…" + note, None
    try:
        for preview, status in (result := Result(in_thread(run, stop))):
            yield preview, status + note, None
    except Exception as e:
        raise fail(e) from e
    yield _outcome(models, result.value, stop, note)


def _own_name(path: Any) -> str:
    """The painting's own file name (never its folder), as the style file's metadata records it."""
    return Path(str(path)).name[:80] if isinstance(path, (str, Path)) else "painting"


def _outcome(models: Models, value: Any, stop: threading.Event, note: str) -> tuple[Any, str, str | None]:
    """The last item: the final preview, the status and the style file (none when stopped)."""
    if isinstance(value, LearnCancelled):
        return None, f"{halted(stop)} at step {len(value.style.losses)}: no style file" + note, None
    learned, preview, seconds = value
    losses = learned.losses
    path = models.outbox.reserve("learned_style.safetensors")
    learned.save(path)
    status = (
        f"done: {len(losses)} steps in {seconds:.0f} s, loss {losses[0]:.4g} -> "
        f"{losses[-1]:.4g}; use the file in Style transfer's Fast mode" + note
    )
    return preview, status, str(path)


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Learn a style" tab and its ``/learn_style`` endpoint."""
    side = min(1024, config.max_size)
    with gr.Row():
        with gr.Column():
            painting = SafeImage(
                label="Painting to learn", sources=["upload", "clipboard"], height=220, elem_id="ls-painting"
            )
            photos = SafeFiles(
                "photo",
                MAX_LEARN_PHOTOS,
                label=f"Photos to learn on (optional, at most {MAX_LEARN_PHOTOS}; none: the bundled ones)",
                file_types=["image"],
                height=140,
                elem_id="ls-photos",
            )
            with gr.Row():
                run = gr.Button("Learn this painting", variant="primary", elem_id="ls-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="ls-cancel")
            size = gr.Slider(
                64, side, value=min(256, side), step=16, label="Crop size (px)", elem_id="ls-size"
            )
            most = learn_steps_that_fit(config, min(256, side), 2)
            steps = gr.Slider(
                1,
                1000,
                value=min(100, most or 1),
                step=1,
                label=f"Steps (about 2.5 s each at 256 px on 2 cores; at most {most} at "
                f"{min(256, side)} px with 2 crops on this server)",
                elem_id="ls-steps",
            )
            batch = gr.Slider(1, MAX_LEARN_BATCH, value=2, step=1, label="Crops per step", elem_id="ls-batch")
            with gr.Row():
                seed = gr.Number(0, label="Seed", precision=0, minimum=0)
                content_weight = gr.Slider(
                    *LEARN_CONTENT_WEIGHTS,
                    value=1.0,
                    step=0.25,
                    label="Content weight (2: keeps more of the subject, moves less)",
                    elem_id="ls-content",
                )
            gr.Markdown(
                f"At most {config.max_learn_minutes:g} minutes of a 2-core CPU's work per request "
                "(crop size² x steps x crops); the file works in Style transfer's Fast mode, the "
                "CLI (`nstcam stylize --fast --style mine.safetensors`) and the Python API."
            )
        with gr.Column():
            preview = SafeImage(label="Preview", interactive=False, elem_id="ls-preview")
            status = gr.Textbox(label="Status", interactive=False, elem_id="ls-status")
            style_file = gr.File(label="Style file", elem_id="ls-file")
    warn_bad_uploads([(painting, "painting")], status)

    @endpoint(learn_handler, _doc(config), runs=(runs, "learn_style"))
    def learn_style(stop: threading.Event, **params: Any) -> Iterator[tuple[Any, str, str | None]]:
        saved: dict = {}
        for image, text, path in learn_handler(models, **params, stop=stop):
            yield as_files(models.outbox, image, saved), text, path

    listen(
        run,
        learn_style,
        [painting, photos, size, steps, batch, seed, content_weight],
        [preview, status, style_file],
        status,
        api_name="learn_style",
        trigger_mode="always_last",
    )
    cancel_on(cancel, runs, "learn_style")


def _doc(config: AppConfig) -> str:
    """:data:`DOC` with this server's limits and the tab's own (``<name>``) filled in."""
    doc = fill_doc(DOC, config)
    mine = {
        "max_learn_minutes": f"{config.max_learn_minutes:g}",
        "max_photos": MAX_LEARN_PHOTOS,
        "max_learn_size": min(1024, config.max_size),
        "max_batch": MAX_LEARN_BATCH,
        "preview": PREVIEW_SIZE,
        "min_cw": f"{LEARN_CONTENT_WEIGHTS[0]:g}",
        "max_cw": f"{LEARN_CONTENT_WEIGHTS[1]:g}",
    }
    for name, value in mine.items():
        doc = doc.replace(f"<{name}>", str(value))
    return doc
