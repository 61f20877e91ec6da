"""The "Grad-CAM" tab: a classifier's top classes, a detector's detections or a segmenter's classes,
each explained (:meth:`nstcam.GradCAM.explain`); its handler, layout and ``/gradcam`` endpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image

from nstcam._mark import tag_weights
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse, stopped
from nstcam.app.found import check_found, class_choices, findings_or_refusal, found_caption, found_row
from nstcam.app.guard.cam_limits import cam_request
from nstcam.app.guard.checks import check
from nstcam.app.guard.inputs import SafeImage, warn_bad_uploads
from nstcam.app.layers import default_layer, layer_choices
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, halted, in_thread
from nstcam.app.run.runs import Runs
from nstcam.app.tabs.panels.faithfulness import panel as faithfulness_panel
from nstcam.app.tabs.panels.trust import panel as trust_panel
from nstcam.app.tools import fill_doc, method_choices, method_note
from nstcam.app.widgets import gallery, sample
from nstcam.cam import arch_kind

__all__ = ["CAM_STARTING", "DOC", "cam_handler", "tab"]

CAM_STARTING = "starting: loading the model and the image…"


DOC = """Grad-CAM saliency: which pixels made a model decide. A classifier (ResNet, ViT, Swin...): each of its
top classes for the image. A detector: each object it found, its box drawn. A segmenter: each class
it found (or the classes asked), its predicted pixels outlined. Returns one heatmap overlay per
result with its label and score. Costs about one forward pass per result (Score-CAM: one per channel
of the layer, at most {scorecam} masked images per request here).

Args:
    image: the photo to explain: {image}.
    model: one of {explain_archs} (default resnet50); detectors: {detectors}; segmenters: {segmenters}.
    layer: the layer the map is read at; empty (default): the model's own default (ResNets "layer4", ViT its last block's "ln_1", Swin its last "norm2", a detector its FPN's levels "backbone"); or a stage or block such as "layer3" or "layer3.1".
    method: one of {methods} (default gradcam). Gradient methods cost about one forward pass per class; the perturbation ones ({perturbation}) one per channel ({samples}); fullgrad and guided-backprop a whole backward pass; cam needs a pooled linear head (ResNets' layer4), legrad a ViT; a method that cannot work on the model says why. Detectors and segmenters take {target_methods}.
    top_k: how many of the top classes to explain, 1 to 10 (a segmenter: its largest classes present; a detector: not used).
    aug_smooth: average the maps of 6 augmentations of the photo (flip x brightness): less noise, 6 times the cost (default false; classifiers only).
    eigen_smooth: the first principal component of the weighted activations instead of their sum (default false).
    classes: a detector's or segmenter's class names to explain, at most 20, each once; empty (default): all it found. Detectors take COCO's 80 names ("airplane", "dining table", "motorcycle", "potted plant", "couch", "tv"...), segmenters Pascal VOC's 20 ("aeroplane", "diningtable", "motorbike", "pottedplant", "sofa", "tvmonitor"...); a name the model does not know is refused with its list. A classifier takes none (it explains its top_k classes).
    score_threshold: a detector's least detection score kept, 0 to 1 (default 0.5).
    max_detections: how many of a detector's detections to explain, 1 to 10 (default 5).

Returns:
    overlays: one image per result, the heatmap over the photo, captioned "label · p=probability" (a detection: "label · score=... · box (x0, y0, x1, y1)"; a segmenter's class: also its share of the image).
    heatmap: the first result's heatmap alone (greyscale, white = most relevant).
    top_classes: a table of rank, class index, label (a detection's with its box) and probability (a detection's score).
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


def cam_handler(
    models: Models,
    image: Any,
    model: str = "resnet50",
    layer: str = "",
    method: str = "gradcam",
    top_k: int = 3,
    progress: Callable[[int, int], None] | None = None,
    aug_smooth: bool = False,
    eigen_smooth: bool = False,
    classes: list[str] | None = None,
    score_threshold: float = 0.5,
    max_detections: int = 5,
) -> tuple[list[tuple[str, str]], str, list[list[Any]]]:
    """Returns (overlay files with captions, first heatmap file, table rows [rank, class, label, p]).

    A classifier's top-k classes; a detector's detections (``score_threshold``, ``max_detections``,
    ``classes`` to keep some labels); a segmenter's ``classes`` (none: the top-k largest present).
    Heatmaps and overlays are computed at most ``display_size`` px on their long side, whatever the
    upload's size; each result is a file of its own (never shared with another request).
    """
    cfg = models.config
    try:
        found = arch_kind(model) != "classifier"
        if not found and any(c and str(c).strip() for c in classes or []):
            raise refuse(
                f"classes picks a detector's or segmenter's classes; {model} is a classifier, which explains "
                "its top_k most likely classes"
            )
        asked = check_found(model, method, classes) if found else []
        img, key, cost = cam_request(
            models, image, model, layer, method, top_k, aug_smooth, cfg.explain_archs
        )
        side, eigen = cfg.display_size, bool(eigen_smooth)
        options = dict(top_k=int(top_k), max_side=side, aug_smooth=bool(aug_smooth), eigen_smooth=eigen)
        if found:
            check(score_threshold, "score threshold", 0, 1)
            check(max_detections, "max detections", 1, 10)
            options.update(
                classes=asked, score_threshold=float(score_threshold), max_detections=int(max_detections)
            )
        seconds = zerogpu.gpu_seconds(cost, cfg)
        task = _explain_found if found else _explain_classes
        stop = threading.Event()  # the gradcam endpoint's progress raises where it is to end
        told = zerogpu.answered_by(progress, stop)
        results = zerogpu.call(task, models, stop, seconds, told, key=key, img=img, **options)
    except Exception as e:
        raise fail(e) from e
    random = bool(results[0].weights and results[0].weights.is_random)
    mark = " (random weights)" if random else ""
    out = models.outbox
    notice = results[0].weights.notice if results[0].weights else ""
    gallery = [
        (out.save(tag_weights(r.overlay, notice, random), f"overlay_{i + 1}.png"), found_caption(r, mark))
        for i, r in enumerate(results)
    ]
    heat = Image.fromarray((results[0].heatmap * 255).astype(np.uint8), "L")
    heat = out.save(tag_weights(heat, notice, random), "heatmap.png")
    table = [found_row(i + 1, r, mark) for i, r in enumerate(results)]
    return gallery, heat, table


@zerogpu.task
def _explain_classes(
    models: Models, put: Any, stop: Any, key: tuple[str, str, str], img: Any, **options: Any
) -> Any:
    """A classifier's maps of its top classes (on ZeroGPU in its worker); each masked-images chunk
    puts ``(done, total)``."""
    return models.cam(*key).explain(img, progress=lambda done, total: put((done, total)), **options)


@zerogpu.task
def _explain_found(
    models: Models, put: Any, stop: Any, key: tuple[str, str, str], img: Any, **options: Any
) -> Any:
    """A detector's or segmenter's maps of what it found (on ZeroGPU in its worker)."""
    return findings_or_refusal(models.cam(*key), img, **options)


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Grad-CAM" tab, its ``/gradcam`` endpoint, the faithfulness and the trust panels."""
    with gr.Row():
        with gr.Column(scale=1):
            ui = _picks(config)
        with gr.Column(scale=2):
            ui.update(_shown())
    cam_image, arch, layer, method = ui["cam_image"], ui["arch"], ui["layer"], ui["method"]
    gr.Examples([[sample("chelsea.png")], [sample("coffee.png")], [sample("rocket.jpg")]], inputs=[cam_image])
    arch.change(
        _model_options,
        arch,
        [layer, ui["top_k"], ui["classes"], ui["detection_row"]],
        api_name=False,
        show_progress="hidden",
    )
    method.change(lambda m: gr.Dropdown(info=method_note(m)), method, method, api_name=False)
    # the page shows the layer used; the API's default stays "" (any model's own default layer)
    demo.load(lambda: gr.Dropdown(value=default_layer("resnet50")), None, layer, api_name=False)
    _explain(config, models, runs, ui)
    # a new explanation or model: no faithfulness figures of the previous map (the run clears the
    # Status itself, with its first step: no old warning under its progress bar)
    figures = faithfulness_panel(
        config, models, runs, cam_image, arch, layer, method, ui["aug_smooth"], ui["eigen_smooth"]
    )
    report = trust_panel(config, models, runs, cam_image, arch, layer)
    for trigger in (ui["explain"].click, arch.change):  # in the browser, at once
        trigger(None, None, [*figures, *report], js="() => [null, null, '', null, null, '']", api_name=False)
    _forget_stale_maps(ui, [*figures, *report])


STALE = "Settings changed since this map: press **Explain** for a map of these settings."
"""The Status once a setting the map depends on changes: the map on screen is taken away, so that no
panel (faithfulness, trust) is read beside a map of other settings."""


def _forget_stale_maps(ui: dict[str, Any], panels: list[gr.components.Component]) -> None:
    """A new model, layer, method or smoothing (a person's change, not the page's own updates) takes
    the map on screen and the panels' figures away at once: Measure and Compare then read the
    settings on screen, as the map would."""
    shown = [ui["overlays"], ui["heatmap"], ui["table"], ui["status"], *panels]
    blank = ["null", "null", "null", json.dumps(STALE), "null", "null", "''", "null", "null", "''"]
    for name in ("arch", "layer", "method", "aug_smooth", "eigen_smooth"):
        ui[name].input(
            None, None, shown, js=f"() => [{', '.join(blank[: len(shown)])}]", api_name=False, queue=False
        )


def _picks(config: AppConfig) -> dict[str, Any]:
    """The left column: the image, the model, its layer and method, what to explain, the buttons."""
    ui: dict[str, Any] = dict(
        cam_image=SafeImage(
            label="Image", sources=["upload", "clipboard", "webcam"], elem_id="cam-input", height=240
        ),
        arch=gr.Dropdown(
            list(config.explain_archs),
            value="resnet50",
            label="Model",
            elem_id="cam-model",
            info="classifiers, then detectors (a map per box) and segmenters (a map per class)",
        ),
        layer=gr.Dropdown(  # empty (an API caller's default): the model's default layer
            layer_choices("resnet50"),
            value="",
            label="Layer (empty: the model's default)",
            allow_custom_value=True,
            elem_id="cam-layer",
        ),
        method=gr.Dropdown(
            method_choices(),
            value="gradcam",
            label="Method",
            info=method_note("gradcam"),
            elem_id="cam-method",
        ),
    )
    with gr.Row():
        ui["aug_smooth"] = gr.Checkbox(False, label="Smooth: 6 augmentations (6x cost)", elem_id="cam-aug")
        ui["eigen_smooth"] = gr.Checkbox(False, label="Smooth: principal component", elem_id="cam-eigen")
    ui["top_k"] = gr.Slider(1, 10, value=3, step=1, label="Top-k classes")
    ui["classes"] = gr.Dropdown(  # all offered models' names (for the API and MCP); one model's once picked
        _all_classes(config),
        value=[],
        multiselect=True,
        allow_custom_value=True,
        visible=False,
        elem_id="cam-classes",
        label="Classes (empty: all found)",
    )
    with gr.Row(visible=False) as ui["detection_row"]:
        ui["score_threshold"] = gr.Slider(0, 1, value=0.5, step=0.05, label="Score threshold")
        ui["max_detections"] = gr.Slider(1, 10, value=5, step=1, label="Max detections")
    with gr.Row():
        ui["explain"] = gr.Button("Explain", variant="primary", elem_id="cam-run")
        ui["cancel"] = gr.Button("Cancel", variant="stop", elem_id="cam-cancel")
    ui["status"] = gr.Markdown(elem_id="cam-status")  # the model, layer and method used, or why not
    return ui


def _shown() -> dict[str, Any]:
    """The right column: the overlays, the heatmap and the top classes."""
    overlays = gallery("Overlays", "cam-overlays")  # captions: class · probability
    with gr.Row():
        heatmap = gr.Image(label="Heatmap", type="filepath", height=220, scale=1, elem_id="cam-heatmap")
        table = gr.Dataframe(
            headers=["rank", "class", "label", "probability"],
            label="Top classes",
            wrap=True,
            column_widths=["12%", "14%", "50%", "24%"],
            elem_id="cam-table",
            scale=2,
        )
    return dict(overlays=overlays, heatmap=heatmap, table=table)


_INPUTS = (
    *("cam_image", "arch", "layer", "method", "top_k", "aug_smooth", "eigen_smooth", "classes"),
    *("score_threshold", "max_detections"),
)
"""The ``/gradcam`` endpoint's inputs, in its parameters' order."""


def _explain(config: AppConfig, models: Models, runs: Runs, ui: dict[str, Any]) -> None:
    """Explain and Cancel: the ``/gradcam`` endpoint, its progress by masked images, its Status."""

    @endpoint(cam_handler, fill_doc(DOC, config), runs=(runs, "gradcam"), progress=True)
    def gradcam(
        stop: threading.Event, progress: gr.Progress, **params: Any
    ) -> Iterator[tuple[Any, Any, Any]]:
        progress(0.0, desc=CAM_STARTING)  # at once, not Gradio's guess from earlier, faster calls
        method = params["method"]

        def run(put: Any) -> Any:
            def report(done: int, total: int) -> None:  # Score-CAM & co: a pass per chunk of channels
                # Cancel, an API cancel, a closed page: the engine removes its hooks in its finally
                if stop.is_set():
                    raise stopped(f"{halted(stop)} after {done} of {total} masked images")
                # the request yields: Gradio can close it (cancel, a closed page) between chunks
                put((done, total))

            return cam_handler(models, **params, progress=report)

        yield gr.skip(), gr.skip(), gr.skip()  # started: the page's Status is cleared (for_people)
        try:
            for done, total in (result := Result(in_thread(run, stop))):
                # said from the request's thread: Gradio's progress tracker is the request's own
                progress(done / total, desc=f"{method}: {done}/{total} masked images")
                yield gr.skip(), gr.skip(), gr.skip()  # nothing new to show: the progress bar moves
        except Exception as e:
            raise fail(e) from e
        gallery, heat, rows = result.value
        score = "score" if arch_kind(params["model"]) == "detector" else "probability"  # as the captions say
        yield gallery, heat, {"headers": ["rank", "class", "label", score], "data": rows}

    warn_bad_uploads([(ui["cam_image"], "image")], ui["status"])
    listen(
        ui["explain"],
        gradcam,
        [ui[name] for name in _INPUTS],
        [ui["overlays"], ui["heatmap"], ui["table"]],
        ui["status"],
        api_name="gradcam",
        done=lambda image, model, layer, method, *_: (
            f"Explained with {model}, layer {layer or default_layer(model)}, method {method}."
        ),
    )
    cancel_on(ui["cancel"], runs, "gradcam")


def _all_classes(config: AppConfig) -> list[str]:
    """The class names of every detector and segmenter the server offers, each once."""
    return list(dict.fromkeys(n for arch in config.found_archs for n in class_choices(arch)))


def _model_options(arch: str) -> tuple:
    """The Grad-CAM tab's options for a model: its layers; top-k for a classifier or a segmenter;
    the class list for a detector or a segmenter, a score threshold and a count for a detector."""
    kind = arch_kind(arch)
    return (
        gr.Dropdown(choices=layer_choices(arch), value=default_layer(arch)),
        gr.Slider(
            visible=kind != "detector",
            label="Top-k classes" if kind == "classifier" else "Top-k classes present",
        ),
        gr.Dropdown(
            choices=class_choices(arch), value=[], visible=kind != "classifier", allow_custom_value=True
        ),
        gr.Row(visible=kind == "detector"),
    )
