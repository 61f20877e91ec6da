"""The "Feature maps" tab: the most active channels of one layer (:func:`nstcam.feature_maps`)."""

from __future__ import annotations

import threading
from typing import Any

import gradio as gr
from PIL import Image

from nstcam._choices import one_of
from nstcam._mark import tag_weights
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.cam_limits import image_size
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.inputs import SafeImage, load_upload, warn_bad_uploads
from nstcam.app.layers import check_layer, default_layer, feature_layer_choices
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import (
    endpoint,
    fail,
    weights_note,
)
from nstcam.app.run.runs import Runs
from nstcam.app.tools import fill_doc
from nstcam.app.widgets import sample

__all__ = ["DOC", "features_handler", "tab"]

DOC = """What the network sees: the activations of one layer of VGG16_bn or a ResNet for the image, as
a grid of its most active channels (forward pass stopped at that layer).

Args:
    image: the photo: {image}.
    model: "vgg16_bn" or one of {archs}.
    layer: empty (default): the model's own (vgg16_bn "relu3_1", a classifier its Grad-CAM layer, e.g. a ResNet's "layer4"); for vgg16_bn a ReLU such as "relu1_1" ... "relu5_3"; for a classifier one of its layers, e.g. "layer3" or "layer3.1" (a wrong name is answered with the valid ones).
    top: how many channels to show, 1 to 64.

Returns:
    grid: the channels' activation maps, each labelled "#channel  mean activation".
    summary: the layer's channel count and map size, and whether the weights are random.
    channels: a table of rank, channel index and mean activation.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


def features_handler(
    models: Models, image: Any, model: str = "vgg16_bn", layer: str = "", top: int = 16
) -> tuple[Image.Image, list[list[Any]], str]:
    """Returns (grid of the most active channels, table rows [rank, channel, mean], a note); an
    empty ``layer`` is the model's own default (``relu3_1`` for VGG16_bn)."""
    try:
        if image is None:
            raise refuse("Upload an image.")
        offered = ("vgg16_bn", *models.config.cam_archs)
        one_of("model", model, offered, also=" on this server", error=refuse)
        layer = layer or ("relu3_1" if model == "vgg16_bn" else default_layer(model))
        check_layer(model, layer, feature_layer_choices(model))
        size = image_size(image, model)  # VGG's long side at 224: a thin strip would leave no rows
        if model == "vgg16_bn":
            size = None  # priced as one photo: the long side is scaled, so no image costs more
        request_cost("features", models.config, top, model, size).check()
        img = load_upload(image, "image")
        engine = _engine(models, model)
        fm = zerogpu.call(
            _feature_maps,
            models,
            threading.Event(),
            zerogpu.ONE_PASS_SECONDS,
            model=model,
            img=img,
            layer=layer,
            top=top,
        )
    except Exception as e:
        raise fail(e) from e
    random = bool(engine.weights and engine.weights.is_random)
    c, h, w = fm.activations.shape
    note = f"{model} {layer}: {c} channels of {w}x{h}; the {len(fm.channels)} most active" + weights_note(
        random
    )
    rows = [[i + 1, ch, round(m, 4)] for i, (ch, m) in enumerate(zip(fm.channels, fm.means, strict=True))]
    return tag_weights(fm.grid, engine.weights.notice if engine.weights else "", random), rows, note


def _engine(models: Models, model: str) -> Any:
    return models.style() if model == "vgg16_bn" else models.cam(model, default_layer(model), "gradcam")


@zerogpu.task
def _feature_maps(
    models: Models, put: Any, stop: Any, model: str, img: Image.Image, layer: str, top: int
) -> Any:
    """The GPU's part of a request: the layer's maps (on ZeroGPU in its worker)."""
    from nstcam.features import feature_maps

    return feature_maps(_engine(models, model), img, layer, top=int(top))


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Feature maps" tab and its ``/features`` endpoint."""
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
    gr.Examples([[sample("chelsea.png")], [sample("astronaut.png")]], inputs=[image])
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

    warn_bad_uploads([(image, "image")], note)

    @endpoint(features_handler, fill_doc(DOC, config))
    def features(stop: None, **params: Any) -> tuple[str, str, list[list[Any]]]:
        g, rows, text = features_handler(models, **params)
        return models.outbox.save(g, "features.png"), text, rows

    listen(show, features, [image, model, layer, top], [grid, note, table], note, api_name="features")
