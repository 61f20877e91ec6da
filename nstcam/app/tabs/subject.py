"""The "Subject-aware" tab: Grad-CAM finds the subject, the style goes around it (or on it), and a
report says whether the classifier still sees it (:func:`nstcam.subject_aware_stylize`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.inputs import SafeImage, load_upload, warn_bad_uploads
from nstcam.app.guard.limits import FEATHER_RANGE
from nstcam.app.layers import default_layer
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import (
    Result,
    cancel_on,
    count,
    endpoint,
    fail,
    halted,
    in_thread,
    progress_reporter,
    weights_note,
)
from nstcam.app.run.runs import Runs
from nstcam.app.tools import fill_doc
from nstcam.app.widgets import as_files, before_after, gallery, pickers, sample, size_steps
from nstcam.style import Cancelled
from nstcam.style.options import split_steps

__all__ = ["DOC", "subject_handler", "tab"]


DOC = """Style transfer around the subject: Grad-CAM finds what the classifier recognises (the cat, the
cup), then the style is painted on the background only (or on the subject only), and a report says
whether the classifier still recognises the subject afterwards. Costs about as much as stylize.

Args:
    content: the photo: {image}.
    style: the painting or texture: {image}.
    mode: "background" (default: style everything but the subject) or "subject" (style only it).
    threshold: saliency above which a pixel is the subject, 0 to 1 (default 0.4).
    feather: soft edge of the mask in px, {feather_range} (default 8).
    size: long side of the result in px, 64 to {max_size}.
    steps: optimisation steps, 1 to {max_steps}.
    model: the classifier that finds the subject, one of {archs} (default resnet50).

Returns:
    mask: the style mask (white = styled, black = content kept).
    result: the stylised image (PNG).
    before: the classifier's top-3 overlays on the photo.
    after: its top-3 overlays on the result.
    report: markdown: top class before and after, its probability, and the IoU of the two maps.
    status: "done: ..." or why it stopped.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


@zerogpu.task
def _subject(
    models: Models, put: Any, stop: Any, img: Any, style_img: Any, model: str, **options: Any
) -> Any:
    """Grad-CAM's subject, then the style around or on it (on ZeroGPU in its worker): puts
    ``("mask", mask, saliency)`` once, then each step's (image so far, status)."""
    from nstcam.subject import subject_aware_stylize

    return subject_aware_stylize(
        img,
        style_img,
        engine=models.style(),
        cam=models.cam(model, default_layer(model), "gradcam"),
        on_mask=lambda mask, saliency: put(("mask", mask, saliency)),
        progress=progress_reporter(put, stop),
        **options,
    )


def subject_handler(
    models: Models,
    content: Any,
    style: Any,
    mode: str = "background",
    threshold: float = 0.4,
    feather: float = 8.0,
    size: int = 384,
    steps: int = 100,
    model: str = "resnet50",
    preview_every: int = 10,
    stop: threading.Event | None = None,
) -> Iterator[tuple[Any, Any, list, list, str, str]]:
    """Streams (mask, image, before overlays, after overlays, report markdown, status).

    One call of :func:`nstcam.subject_aware_stylize`: the mask arrives through ``on_mask`` before
    the masked stylisation streams its previews (``stop`` cancels it at its next step), then the
    before/after report.
    """
    from nstcam.subject import SubjectAwareResult

    cfg = models.config
    stop = stop or threading.Event()
    try:
        if content is None or style is None:
            raise refuse("Upload a content image and a style image.")
        cost = request_cost("subject_aware", cfg, size, steps).check()
        check(threshold, "threshold", 0, 1)
        check(feather, "feather", *FEATHER_RANGE)
        img, style_img = load_upload(content, "content"), load_upload(style, "style")
        engine = models.style()
        models.cam(model, default_layer(model), "gradcam")  # built (or refused) here
    except Exception as e:
        raise fail(e) from e
    note = weights_note(engine.weights.is_random)

    scales, per_scale = split_steps(int(size), int(steps))

    seconds = zerogpu.gpu_seconds(cost, models.config)
    options = dict(
        mode=mode,
        threshold=float(threshold),
        feather=float(feather),
        top_k=3,
        size=int(size),
        scales=scales,
        steps=per_scale,  # the steps asked, shared over every scale
        seed=0,
        preview_every=max(1, int(preview_every)),
    )

    def run(put: Callable[[Any], None]) -> SubjectAwareResult | Cancelled:
        try:
            return zerogpu.call(
                _subject, models, stop, seconds, put, img=img, style_img=style_img, model=model, **options
            )
        except Cancelled as c:
            return c

    mask_img = None
    yield None, None, [], [], "", "starting: finding the subject with Grad-CAM…" + note
    try:
        for item in (result := Result(in_thread(run, stop))):
            if item[0] == "mask":
                mask_img = Image.fromarray((item[1] * 255).astype(np.uint8), "L")
                status = f"subject: {item[2].label}{note}; stylising…"
                yield mask_img, None, [], [], "", status
            else:
                yield mask_img, item[0], [], [], "", item[1] + note
    except Exception as e:
        raise fail(e) from e
    if isinstance(result.value, Cancelled):
        c = result.value
        yield mask_img, c.image, [], [], "", f"{halted(stop)} at step {len(c.history)}/{int(steps)}" + note
        return
    out, rep = result.value.image, result.value.report
    mark = " (random weights)" if engine.weights.is_random else ""
    before = [(r.overlay, f"before: {r.label} · p={r.score:.3f}{mark}") for r in rep.before]
    after = [(r.overlay, f"after: {r.label} · p={r.score:.3f}{mark}") for r in rep.after]
    d = rep.to_dict()
    md = (
        f"**{rep.summary()}**\n\n| | before | after |\n| --- | --- | --- |\n"
        f"| top-1 | {rep.before[0].label} ({rep.before[0].score:.3f}) "
        f"| {rep.after[0].label} ({rep.after[0].score:.3f}) |\n"
        f"| p({d['class']}) | {d['score_before']:.3f} | {d['score_after']:.3f} |\n"
        f"| map IoU (threshold {d['threshold']}) | | {d['iou']:.3f} |"
    )
    meta = out.info["nstcam"]
    steps_done = count(len(meta["history"]), "step")
    status = f"done: {out.width}x{out.height}, {steps_done} in {meta['seconds']:.1f} s{note}"
    yield mask_img, out, before, after, md, status


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Subject-aware" tab and its ``/subject_aware`` endpoint."""
    gr.Markdown(
        "Grad-CAM finds the subject; the style goes to the background (or only to the subject). "
        "The report says whether the classifier still recognises the subject."
    )
    with gr.Row():
        with gr.Column():
            with gr.Row():
                sa_content, sa_style = pickers("sa", "Style")
            with gr.Row():
                sa_run = gr.Button("Stylise around the subject", variant="primary", elem_id="sa-run")
                sa_cancel = gr.Button("Cancel", variant="stop", elem_id="sa-cancel")
            sa_mode = gr.Radio(["background", "subject"], value="background", label="Stylise the")
            sa_threshold = gr.Slider(0, 1, value=0.4, step=0.05, label="Saliency threshold")
            sa_feather = gr.Slider(*FEATHER_RANGE, value=8, step=1, label="Feather (px)")
            sa_size, sa_steps = size_steps(config)
            sa_arch = gr.Dropdown(list(config.cam_archs), value="resnet50", label="Classifier")
        with gr.Column():
            with gr.Row():
                sa_mask = gr.Image(
                    label="Mask", type="filepath", height=240, elem_id="sa-mask"
                )  # white = styled
                sa_result = SafeImage(  # an input of the slider's step: checked as uploads are
                    label="Result",
                    format="png",
                    height=240,
                    elem_id="sa-result",
                    interactive=False,
                )
            gr.Markdown("Mask: white is styled, black keeps the content.")
            sa_status = gr.Textbox(label="Status", interactive=False, elem_id="sa-status")
            sa_slider = gr.ImageSlider(
                label="Before / after (drag)", type="filepath", elem_id="sa-slider", max_height=420
            )
            sa_report = gr.Markdown(label="Report")
            sa_before = gallery("Before", "sa-before")
            sa_after = gallery("After", "sa-after")
    gr.Examples([[sample("chelsea.png"), sample("hubble_deep_field.jpg")]], inputs=[sa_content, sa_style])

    warn_bad_uploads([(sa_content, "content"), (sa_style, "style")], sa_status)

    @endpoint(subject_handler, fill_doc(DOC, config, feather_range=FEATHER_RANGE), runs=(runs, "subject"))
    def subject_aware(stop: threading.Event, **params: Any) -> Iterator[tuple[Any, ...]]:
        saved: dict = {}
        for item in subject_handler(models, **params, stop=stop):
            yield as_files(models.outbox, item, saved)

    listen(
        sa_run,
        subject_aware,
        [sa_content, sa_style, sa_mode, sa_threshold, sa_feather, sa_size, sa_steps, sa_arch],
        [sa_mask, sa_result, sa_before, sa_after, sa_report, sa_status],
        sa_status,
        api_name="subject_aware",
        trigger_mode="always_last",
    ).then(
        lambda content, result: before_after(models.outbox, content, result),
        [sa_content, sa_result],
        sa_slider,
        api_name=False,
    )

    cancel_on(sa_cancel, runs, "subject")
