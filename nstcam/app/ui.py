"""The Blocks app: five tabs over the handlers, and the named API endpoints ``/stylize``,
``/stylize_video``, ``/gradcam``, ``/faithfulness``, ``/subject_aware`` and ``/features`` (also MCP
tools, described in ``tools.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from fastapi.exceptions import RequestValidationError
from PIL import Image
from starlette.middleware import Middleware

from nstcam.app.api_info import describe_api
from nstcam.app.config import AppConfig, Models, Runs
from nstcam.app.errors import refuse
from nstcam.app.files import Outbox, SafeEditor, SafeImage, load_upload, warn_bad_uploads
from nstcam.app.found import class_choices
from nstcam.app.gate import guard_requests
from nstcam.app.handlers import (
    CAM_STARTING,
    _fail,
    _in_thread,
    _Result,
    cam_handler,
    default_layer,
    faithfulness_handler,
    feature_layer_choices,
    features_handler,
    layer_choices,
    stylize_handler,
    subject_handler,
)
from nstcam.app.limits import RequestLimits, validation_error_handler
from nstcam.app.listen import listen
from nstcam.app.mcp import enable_mcp
from nstcam.app.tools import method_choices, method_note, tool_doc
from nstcam.app.video import video_tab
from nstcam.cam import arch_kind
from nstcam.style.losses import REGISTRY as STYLE_LOSSES

__all__ = ["build_demo", "launch_kwargs"]

SAMPLES = Path(__file__).resolve().parent.parent / "assets" / "samples"
RANDOM_BANNER = (
    "⚠️ **Random weights** — this server runs with seeded random weights (offline/test mode). "
    "Stylised images and Grad-CAM maps are **not meaningful**."
)
CSS = """
/* results and previews fill their panel whatever their pixel size (a 64 px result is not a strip) */
#st-result .image-frame, #sa-result .image-frame, #vid-preview .image-frame { width: 100% !important; }
#st-result img, #sa-result img, #vid-preview img {
    width: 100% !important; height: auto !important; max-height: 420px; object-fit: contain !important;
}
/* the feature-map grid: its first row's captions below the label badge and the toolbar, not under them */
#fm-grid .image-container { padding-top: 44px; }
/* galleries of overlays: whole images at their own aspect, the caption below the image, no blank band */
.nst-gallery .grid-wrap { min-height: 0 !important; height: auto !important; max-height: none !important; }
.nst-gallery .gallery-item { height: auto !important; }
.nst-gallery .thumbnail-item {
    aspect-ratio: auto !important; height: auto !important; display: flex; flex-direction: column;
}
.nst-gallery .thumbnail-item img { height: auto !important; width: 100%; object-fit: contain !important; }
.nst-gallery .caption-label {
    position: static !important; white-space: normal; overflow: visible; text-overflow: clip;
    max-width: none !important; transform: none !important; margin: 0 !important;
}
"""


def _gallery(label: str, elem_id: str) -> gr.Gallery:
    """An overlay gallery: whole images (never cropped, not opened in a preview), captions below."""
    return gr.Gallery(
        label=label,
        columns=3,
        height="auto",
        object_fit="contain",
        allow_preview=False,
        elem_id=elem_id,
        elem_classes=["nst-gallery"],
    )


def _as_files(outbox: Outbox, item: Any, saved: dict[int, tuple[Image.Image, str]] | None = None) -> Any:
    """Every PIL image in a handler's output written to a file of its own.

    Gradio would save a returned PIL image under a name derived from its content, so two requests
    with the same result would write and serve one file at once (0-byte downloads under load).
    ``saved`` (one per request) writes an image object that comes again (the preview repeated at
    each step until the next) only once.
    """
    if isinstance(item, Image.Image):
        if saved is None:
            return outbox.save(item, "image.png")
        if id(item) not in saved:
            saved[id(item)] = (item, outbox.save(item, "image.png"))  # the image kept: its id stays its own
        return saved[id(item)][1]
    if isinstance(item, tuple):
        return tuple(_as_files(outbox, x, saved) for x in item)
    if isinstance(item, list):
        return [_as_files(outbox, x, saved) for x in item]
    return item


def _sample(name: str) -> str:
    return str(SAMPLES / name)


def launch_kwargs(config: AppConfig, mcp: bool = False) -> dict[str, Any]:
    """What ``demo.launch`` needs besides host and port: the upload cap, the caps on every request
    (:class:`nstcam.app.limits.RequestLimits`: body size, uploads in all, the event named; malformed
    requests answered in one line), errors shown, and with ``mcp`` the endpoints served as Model
    Context Protocol tools (``/gradio_api/mcp/``)."""
    if mcp:
        enable_mcp()
    upload_bytes = int(config.max_upload_mb * 1024 * 1024)
    return {
        "max_file_size": upload_bytes,
        "show_error": True,
        "css": CSS,
        "mcp_server": bool(mcp),
        "app_kwargs": {
            "middleware": [Middleware(RequestLimits, upload_bytes=upload_bytes)],
            "exception_handlers": {RequestValidationError: validation_error_handler},
        },
    }


def _before_after(outbox: Outbox, content: str | None, result: str | None) -> tuple[str, str] | None:
    """The content at the result's size beside the result, for the before/after slider."""
    if not content or not result:
        return None
    after = Image.open(result)
    before = load_upload(content, "content").resize(after.size, Image.Resampling.LANCZOS)
    return outbox.save(before, "before.png"), result


def build_demo(config: AppConfig | None = None, models: Models | None = None) -> gr.Blocks:
    """Builds the Gradio Blocks app (tabs "Style transfer", "Video", "Grad-CAM", "Subject-aware" and
    "Feature maps").

    Launch it with ``demo.launch(**launch_kwargs(config))`` so that uploads are capped.
    """
    config = config or AppConfig()
    models = models or Models(config)
    runs = models.runs
    with gr.Blocks(title="nstcam — style transfer and Grad-CAM", delete_cache=(600, 1800)) as demo:
        gr.Markdown(
            "# nstcam\nNeural style transfer on VGG16_bn and Grad-CAM on torchvision classifiers, detectors "
            "and segmenters, built on PyTorch hooks."
        )
        if config.random_weights:
            gr.Markdown(RANDOM_BANNER, elem_id="random-banner")
        for name, err in models.errors.items():
            gr.Markdown(f"⚠️ **{name} unavailable**: {err}", elem_classes=["unavailable"])
        on_cpu = config.torch_device.type == "cpu"
        limits = (
            f"Running on **{config.torch_device.type.upper()}**: outputs up to {config.max_size} px and "
            f"{config.max_steps} steps, uploads up to {config.max_upload_mb:g} MB, Score-CAM up to "
            f"{config.scorecam_budget} masked images (channels x top-k) per request"
            + (" (CPU limits; a GPU Space allows more)." if on_cpu else ".")
        )
        gr.Markdown(limits, elem_id="limits")
        with gr.Tab("Style transfer"):
            _style_tab(config, models, runs)
        with gr.Tab("Video"):
            video_tab(config, models, runs)
        with gr.Tab("Grad-CAM"):
            _cam_tab(config, models, runs, demo)
        with gr.Tab("Subject-aware"):
            _subject_tab(config, models, runs)
        with gr.Tab("Feature maps"):
            _features_tab(config, models, demo)
    demo.queue(default_concurrency_limit=1 if on_cpu else 2, max_size=32)
    return guard_requests(describe_api(demo, config))


def _size_steps(config: AppConfig) -> tuple[gr.Slider, gr.Slider]:
    # the limits in the labels: a number typed over them is clamped by the browser, so say them
    size = gr.Slider(
        64,
        config.max_size,
        value=min(384, config.max_size),
        step=16,
        label=f"Size (long side, px; at most {config.max_size} here)",
    )
    steps = gr.Slider(
        1,
        config.max_steps,
        value=min(100, config.max_steps),
        step=1,
        label=f"Steps (at most {config.max_steps} here)",
    )
    return size, steps


def _pickers(prefix: str, style_label: str) -> tuple[gr.Image, gr.Image]:
    """The content picker (upload, clipboard, webcam) and a style picker, ids ``<prefix>-content``
    and ``<prefix>-style``."""
    content = SafeImage(
        label="Content", sources=["upload", "clipboard", "webcam"], height=200, elem_id=f"{prefix}-content"
    )
    style = SafeImage(
        label=style_label, sources=["upload", "clipboard"], height=200, elem_id=f"{prefix}-style"
    )
    return content, style


def _style_tab(config: AppConfig, models: Models, runs: Runs) -> None:
    with gr.Row():
        with gr.Column():
            with gr.Row():
                content, style_a = _pickers("st", "Style A")
                style_b = SafeImage(
                    label="Style B (optional)",
                    sources=["upload", "clipboard"],
                    height=200,
                    elem_id="st-style-b",
                )
            with gr.Row():
                run = gr.Button("Stylise", variant="primary", elem_id="st-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="st-cancel")
            blend = gr.Slider(0, 1, value=0.0, step=0.05, label="Blend: weight of style B")
            with gr.Accordion("Regions: a mask per style (optional)", open=False):
                gr.Markdown(
                    "Paint where each style goes, or upload a black and white mask (white = styled). "
                    "With style B, each style keeps its own region (blend is not used) and a style "
                    "without a mask takes the rest; where no mask reaches, the content is kept."
                )
                with gr.Row():
                    mask_a, mask_b = (
                        SafeEditor(
                            label=f"Mask {k}",
                            sources=["upload", "clipboard"],
                            height=260,
                            elem_id=f"st-mask-{k.lower()}",
                            brush=gr.Brush(colors=["#ffffff"]),
                        )
                        for k in "AB"
                    )
            size, steps = _size_steps(config)
            with gr.Accordion("Advanced", open=False):
                style_strength = gr.Number(50.0, label="Style strength", minimum=0)
                content_strength = gr.Number(1.0, label="Content strength", minimum=0)
                smoothness = gr.Number(5.0, label="Smoothness (total variation)", minimum=0)
                preserve = gr.Dropdown(
                    ["off", "luminance", "histogram"],
                    value="off",
                    allow_custom_value=True,  # API clients of the checkbox era may still send true/false
                    label="Preserve content colours",
                    info="luminance: the content's chroma back; histogram: the style recoloured first",
                )
                seed = gr.Number(0, label="Seed", precision=0, minimum=0)
                tile = gr.Number(
                    0,
                    label="Tile (px; 0 = whole image)",
                    info="optimise big outputs window by window: memory follows the tile",
                    precision=0,
                    minimum=0,
                )
                optimizer = gr.Radio(["lbfgs", "adam"], value="lbfgs", label="Optimiser")
                style_loss = gr.Radio(
                    list(STYLE_LOSSES),
                    value="gram",
                    label="Style loss",
                    info="; ".join(f"{name}: {loss.summary}" for name, loss in STYLE_LOSSES.items()),
                )
                init = gr.Dropdown(
                    ["content", "noise", "style", "style_stats"],
                    value="content",
                    label="Start from",
                    info="style_stats: noise with the style's colour mean and covariance",
                )
                average = gr.Number(
                    0,
                    label="Average the steps (decay; 0 = off)",
                    minimum=0,
                    maximum=0.9999,
                    info="e.g. 0.99: the result is the moving average of the steps' images",
                )
        with gr.Column():
            result = SafeImage(  # read by the slider's step (an input there): checked as uploads are
                label="Result", format="png", elem_id="st-result", interactive=False
            )
            status = gr.Textbox(label="Status", interactive=False, elem_id="st-status")
            download = gr.File(label="Download PNG", elem_id="st-download")
            slider = gr.ImageSlider(
                label="Before / after (drag)", type="filepath", elem_id="st-slider", max_height=420
            )
    gr.Examples(
        [
            [_sample("chelsea.png"), _sample("hubble_deep_field.jpg")],
            [_sample("astronaut.png"), _sample("brick.png")],
        ],
        inputs=[content, style_a],
    )

    warn_bad_uploads([(content, "content"), (style_a, "style A"), (style_b, "style B")], status)

    def stylize(
        content: str,
        style: str,
        style_b: str | None = None,
        blend: float = 0.0,
        size: int = 384,
        steps: int = 100,
        style_weight: float = 50.0,
        content_weight: float = 1.0,
        tv_weight: float = 5.0,
        preserve_color: str = "off",
        seed: int = 0,
        optimizer: str = "lbfgs",
        tile: int = 0,
        style_loss: str = "gram",
        init: str = "content",
        average: float = 0.0,
        mask_a: dict | None = None,
        mask_b: dict | None = None,
        request: gr.Request = None,
    ):
        stop = runs.start("stylize", request)
        saved: dict = {}
        try:
            for item in stylize_handler(
                models,
                content,
                style,
                style_b,
                blend,
                size,
                steps,
                style_weight,
                content_weight,
                tv_weight,
                preserve_color,
                seed,
                optimizer,
                tile,
                stop=stop,
                style_loss=style_loss,
                init=init,
                average=average,
                mask_a=mask_a,
                mask_b=mask_b,
            ):
                image, status, png = item  # the result's PNG, when there is one, is shown as is
                yield png or _as_files(models.outbox, image, saved), status, png
        finally:
            runs.finish("stylize", request, stop)

    stylize.__doc__ = tool_doc("stylize", config)
    inputs = [content, style_a, style_b, blend, size, steps, style_strength, content_strength, smoothness]
    listen(
        run,
        stylize,
        [*inputs, preserve, seed, optimizer, tile, style_loss, init, average, mask_a, mask_b],
        [result, status, download],
        status,
        api_name="stylize",
        trigger_mode="always_last",  # a click while the cancelled run winds down starts right after
    ).then(
        lambda content, result: _before_after(models.outbox, content, result),
        [content, result],
        slider,
        api_name=False,
    )

    def cancel_run(request: gr.Request) -> None:
        runs.cancel("stylize", request)

    cancel.click(cancel_run, None, None, api_name=False, concurrency_limit=None)


def _cam_tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    with gr.Row():
        with gr.Column(scale=1):
            cam_image = SafeImage(
                label="Image", sources=["upload", "clipboard", "webcam"], elem_id="cam-input", height=240
            )
            arch = gr.Dropdown(
                list(config.explain_archs),
                value="resnet50",
                label="Model",
                elem_id="cam-model",
                info="classifiers, then detectors (a map per box) and segmenters (a map per class)",
            )
            layer = gr.Dropdown(  # empty (an API caller's default): the model's default layer
                layer_choices("resnet50"),
                value="",
                label="Layer (empty: the model's default)",
                allow_custom_value=True,
                elem_id="cam-layer",
            )
            method = gr.Dropdown(
                method_choices(),
                value="gradcam",
                label="Method",
                info=method_note("gradcam"),
                elem_id="cam-method",
            )
            with gr.Row():
                aug_smooth = gr.Checkbox(False, label="Smooth: 6 augmentations (6x cost)", elem_id="cam-aug")
                eigen_smooth = gr.Checkbox(False, label="Smooth: principal component", elem_id="cam-eigen")
            top_k = gr.Slider(1, 10, value=3, step=1, label="Top-k classes")
            classes = gr.Dropdown(  # all offered models' names (for the API and MCP); one model's once picked
                _all_classes(config),
                value=[],
                multiselect=True,
                allow_custom_value=True,
                visible=False,
                elem_id="cam-classes",
                label="Classes (empty: all found)",
            )
            with gr.Row(visible=False) as detection_row:
                score_threshold = gr.Slider(0, 1, value=0.5, step=0.05, label="Score threshold")
                max_detections = gr.Slider(1, 10, value=5, step=1, label="Max detections")
            with gr.Row():
                explain = gr.Button("Explain", variant="primary", elem_id="cam-run")
                cam_cancel = gr.Button("Cancel", variant="stop", elem_id="cam-cancel")
            cam_status = gr.Markdown(elem_id="cam-status")  # the model, layer and method used, or why not
        with gr.Column(scale=2):
            overlays = _gallery("Overlays", "cam-overlays")  # captions: class · probability
            with gr.Row():
                heatmap = gr.Image(
                    label="Heatmap", type="filepath", height=220, scale=1, elem_id="cam-heatmap"
                )
                table = gr.Dataframe(
                    headers=["rank", "class", "label", "probability"],
                    label="Top classes",
                    wrap=True,
                    column_widths=["12%", "14%", "50%", "24%"],
                    elem_id="cam-table",
                    scale=2,
                )
    gr.Examples(
        [[_sample("chelsea.png")], [_sample("coffee.png")], [_sample("rocket.jpg")]], inputs=[cam_image]
    )
    arch.change(
        _model_options,
        arch,
        [layer, top_k, classes, detection_row],
        api_name=False,
        show_progress="hidden",
    )
    method.change(lambda m: gr.Dropdown(info=method_note(m)), method, method, api_name=False)
    # the page shows the layer used; the API's default stays "" (any model's own default layer)
    demo.load(lambda: gr.Dropdown(value=default_layer("resnet50")), None, layer, api_name=False)

    def gradcam(
        image: str,
        model: str = "resnet50",
        layer: str = "",
        method: str = "gradcam",
        top_k: int = 3,
        aug_smooth: bool = False,
        eigen_smooth: bool = False,
        classes: list[str] | None = None,
        score_threshold: float = 0.5,
        max_detections: int = 5,
        progress=gr.Progress(),  # noqa: B008 - Gradio's idiom: injected, not part of the API
        request: gr.Request = None,
    ):
        progress(0.0, desc=CAM_STARTING)  # at once, not Gradio's guess from earlier, faster calls
        stop = runs.start("gradcam", request)

        def run(put: Any) -> Any:
            def report(done: int, total: int) -> None:  # Score-CAM & co: a pass per chunk of channels
                # Cancel, an API cancel, a closed page: the engine removes its hooks in its finally
                if stop.is_set():
                    raise refuse(f"cancelled after {done} of {total} masked images")
                progress(done / total, desc=f"{method}: {done}/{total} masked images")
                put(None)  # the request yields: Gradio can close it (cancel, a closed page) between chunks

            return cam_handler(
                models,
                image,
                model,
                layer,
                method,
                top_k,
                progress=report,
                aug_smooth=aug_smooth,
                eigen_smooth=eigen_smooth,
                classes=classes,
                score_threshold=score_threshold,
                max_detections=max_detections,
            )

        yield gr.skip(), gr.skip(), gr.skip()  # started: the page's Status is cleared (for_people)
        try:
            for _ in (result := _Result(_in_thread(run, stop))):
                yield gr.skip(), gr.skip(), gr.skip()  # nothing new to show: the progress bar moves
        except Exception as e:
            raise _fail(e) from e
        finally:
            runs.finish("gradcam", request, stop)
        gallery, heat, rows = result.value
        score = "score" if arch_kind(model) == "detector" else "probability"  # as the captions say
        yield gallery, heat, {"headers": ["rank", "class", "label", score], "data": rows}

    warn_bad_uploads([(cam_image, "image")], cam_status)
    gradcam.__doc__ = tool_doc("gradcam", config)
    listen(
        explain,
        gradcam,
        [
            cam_image,
            arch,
            layer,
            method,
            top_k,
            aug_smooth,
            eigen_smooth,
            classes,
            score_threshold,
            max_detections,
        ],
        [overlays, heatmap, table],
        cam_status,
        api_name="gradcam",
        done=lambda image, model, layer, method, *_: (
            f"Explained with {model}, layer {layer or default_layer(model)}, method {method}."
        ),
    )

    def cancel_run(request: gr.Request) -> None:
        runs.cancel("gradcam", request)

    cam_cancel.click(cancel_run, None, None, api_name=False, concurrency_limit=None)
    # a new explanation or model: no faithfulness figures of the previous map (the run clears the
    # Status itself, with its first step: no old warning under its progress bar)
    figures = _faithfulness_panel(config, models, cam_image, arch, layer, method, aug_smooth, eigen_smooth)
    for trigger in (explain.click, arch.change):  # in the browser, at once
        trigger(None, None, list(figures), js="() => [null, null, '']", api_name=False)


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


def _faithfulness_panel(
    config: AppConfig, models: Models, *inputs: gr.components.Component
) -> tuple[gr.components.Component, ...]:
    """The panel under the Grad-CAM tab and its ``/faithfulness`` endpoint; returns its outputs
    (figures, curves, verdict)."""
    steps = 20 if config.torch_device.type == "cuda" else 10  # as faithfulness_handler measures
    cost = f"about {4 * steps + 44} forward passes of the model"
    with gr.Accordion("How faithful is this map?", open=False, elem_id="cam-faithfulness"):
        gr.Markdown(
            "Perturbs the image by the top-1 class's map and watches the class probability, beside "
            f"a random map's figures ({cost}; computed only when you ask)."
        )
        measure = gr.Button("Measure faithfulness", elem_id="cam-measure")
        verdict = gr.Markdown(label="Verdict")
        figures = gr.Dataframe(
            headers=["metric", "this map", "random map", "better when"],
            label="Faithfulness",
            wrap=True,
            elem_id="cam-metrics",
        )
        curves = gr.Image(label="Curves", type="filepath", elem_id="cam-curves")  # deletion, insertion

    def faithfulness(
        image: str,
        model: str = "resnet50",
        layer: str = "",
        method: str = "gradcam",
        aug_smooth: bool = False,
        eigen_smooth: bool = False,
    ):
        return faithfulness_handler(models, image, model, layer, method, aug_smooth, eigen_smooth)

    faithfulness.__doc__ = tool_doc("faithfulness", config)

    listen(measure, faithfulness, list(inputs), [figures, curves, verdict], verdict, api_name="faithfulness")
    return figures, curves, verdict


def _subject_tab(config: AppConfig, models: Models, runs: Runs) -> None:
    gr.Markdown(
        "Grad-CAM finds the subject; the style goes to the background (or only to the subject). "
        "The report says whether the classifier still recognises the subject."
    )
    with gr.Row():
        with gr.Column():
            with gr.Row():
                sa_content, sa_style = _pickers("sa", "Style")
            with gr.Row():
                sa_run = gr.Button("Stylise around the subject", variant="primary", elem_id="sa-run")
                sa_cancel = gr.Button("Cancel", variant="stop", elem_id="sa-cancel")
            sa_mode = gr.Radio(["background", "subject"], value="background", label="Stylise the")
            sa_threshold = gr.Slider(0, 1, value=0.4, step=0.05, label="Saliency threshold")
            sa_feather = gr.Slider(0, 32, value=8, step=1, label="Feather (px)")
            sa_size, sa_steps = _size_steps(config)
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
            sa_before = _gallery("Before", "sa-before")
            sa_after = _gallery("After", "sa-after")
    gr.Examples([[_sample("chelsea.png"), _sample("hubble_deep_field.jpg")]], inputs=[sa_content, sa_style])

    warn_bad_uploads([(sa_content, "content"), (sa_style, "style")], sa_status)

    def subject_aware(
        content: str,
        style: str,
        mode: str = "background",
        threshold: float = 0.4,
        feather: float = 8.0,
        size: int = 384,
        steps: int = 100,
        model: str = "resnet50",
        request: gr.Request = None,
    ):
        stop = runs.start("subject", request)
        saved: dict = {}
        try:
            for item in subject_handler(
                models, content, style, mode, threshold, feather, size, steps, model, stop=stop
            ):
                yield _as_files(models.outbox, item, saved)
        finally:
            runs.finish("subject", request, stop)

    subject_aware.__doc__ = tool_doc("subject_aware", config)
    listen(
        sa_run,
        subject_aware,
        [sa_content, sa_style, sa_mode, sa_threshold, sa_feather, sa_size, sa_steps, sa_arch],
        [sa_mask, sa_result, sa_before, sa_after, sa_report, sa_status],
        sa_status,
        api_name="subject_aware",
        trigger_mode="always_last",
    ).then(
        lambda content, result: _before_after(models.outbox, content, result),
        [sa_content, sa_result],
        sa_slider,
        api_name=False,
    )

    def cancel_run(request: gr.Request) -> None:
        runs.cancel("subject", request)

    sa_cancel.click(cancel_run, None, None, api_name=False, concurrency_limit=None)


def _features_tab(config: AppConfig, models: Models, demo: gr.Blocks) -> None:
    gr.Markdown("What the network sees: the most active channels of one layer (forward stopped there).")
    with gr.Row():
        with gr.Column(scale=1):
            image = SafeImage(
                label="Image", sources=["upload", "clipboard", "webcam"], height=240, elem_id="fm-image"
            )
            model = gr.Dropdown(["vgg16_bn", *config.cam_archs], value="vgg16_bn", label="Model")
            layer = gr.Dropdown(  # the choices follow the model; empty (the API's default): the model's own
                feature_layer_choices("vgg16_bn"),
                value="",
                label="Layer",
                allow_custom_value=True,
                elem_id="fm-layer",
            )
            top = gr.Slider(1, 64, value=16, step=1, label="Channels")
            show = gr.Button("Show feature maps", variant="primary", elem_id="fm-run")
        with gr.Column(scale=2):
            grid = gr.Image(label="Grid", type="filepath", elem_id="fm-grid")  # tiles: "#channel  mean"
            note = gr.Textbox(label="Summary", interactive=False, elem_id="fm-summary")
            table = gr.Dataframe(headers=["rank", "channel", "mean activation"], label="Channels")
    gr.Examples([[_sample("chelsea.png")], [_sample("astronaut.png")]], inputs=[image])
    model.change(
        lambda m: gr.Dropdown(
            choices=feature_layer_choices(m), value="relu3_1" if m == "vgg16_bn" else default_layer(m)
        ),
        model,
        layer,
        api_name=False,
    )

    # the page shows the layer used; the API's default stays "" (any model's own default layer)
    demo.load(lambda: gr.Dropdown(value="relu3_1"), None, layer, api_name=False)

    def features(image: str, model: str = "vgg16_bn", layer: str = "", top: int = 16):
        g, rows, text = features_handler(models, image, model, layer, top)
        return models.outbox.save(g, "features.png"), text, rows

    warn_bad_uploads([(image, "image")], note)
    features.__doc__ = tool_doc("features", config)

    listen(show, features, [image, model, layer, top], [grid, note, table], note, api_name="features")
