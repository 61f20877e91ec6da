"""The faithfulness panel under the Grad-CAM tab: how the class probability follows the map, beside a
random map (:func:`nstcam.metrics.faithfulness`), and its ``/faithfulness`` endpoint."""

from __future__ import annotations

from typing import Any

import gradio as gr

from nstcam.app.cam_limits import cam_request
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.listen import listen
from nstcam.app.plots import curves_figure
from nstcam.app.running import (
    endpoint,
    fail,
    gpu,
    weights_note,
)
from nstcam.app.tools import fill_doc
from nstcam.cam import arch_kind

__all__ = ["DOC", "faithfulness_handler", "panel"]

DOC = """How faithful is a Grad-CAM map? Perturbs the photo by the top class's map and watches the
class probability (confidence change, deletion and insertion AUC, ROAD), beside the same figures for
a random map: a map whose figures are near the random map's explains little. Costs {passes}
forward passes.

Args:
    image: the photo: {image}.
    model: the classifier, one of {archs} (default resnet50).
    layer: the layer the map is read at; empty (default): the model's default.
    method: one of {methods} (default gradcam).
    aug_smooth: average the maps of 6 augmentations of the photo (default false).
    eigen_smooth: the first principal component of the weighted activations (default false).

Returns:
    faithfulness: a table of metric, this map, random map and which direction is better.
    curves: a plot of the deletion and insertion curves of both maps.
    verdict: a sentence: on how many of the 4 metrics the map beats a random one.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


_FIGURES = (
    ("confidence_change", "confidence change (score on image x map minus on image)", "higher"),
    ("deletion_auc", "deletion AUC (most relevant pixels removed first)", "lower"),
    ("insertion_auc", "insertion AUC (most relevant pixels put back first)", "higher"),
    ("road", "ROAD, (LeRF - MoRF) / 2 with noisy imputation", "higher"),
)


def faithfulness_handler(
    models: Models,
    image: Any,
    model: str = "resnet50",
    layer: str = "",
    method: str = "gradcam",
    aug_smooth: bool = False,
    eigen_smooth: bool = False,
) -> tuple[list[list[Any]], str, str]:
    """How faithful the top-1 class's map is: (table rows [metric, this map, random map, better],
    curves figure file, verdict). Runs only on request: it costs about ``4 * steps + 44`` forward
    passes, the map's and the random map's together (steps: 10 on CPU, 20 on GPU)."""
    cfg = models.config
    try:
        if arch_kind(model) != "classifier":
            raise refuse(
                f"faithfulness measures a classifier's class probability; {model} is a {arch_kind(model)}: "
                "pick a classifier"
            )
        img, cam = cam_request(models, image, model, layer, method, 1, aug_smooth)
        steps = 20 if cfg.torch_device.type == "cuda" else 10
        (r,) = gpu(cam.explain)(
            img,
            top_k=1,
            max_side=cfg.display_size,
            evaluate=True,
            evaluate_steps=steps,
            aug_smooth=bool(aug_smooth),
            eigen_smooth=bool(eigen_smooth),
        )
    except Exception as e:
        raise fail(e) from e
    ours, chance = r.faithfulness, r.baseline
    rows, wins = [], 0
    for key, name, better in _FIGURES:
        a, b = getattr(ours, key), getattr(chance, key)
        wins += (a < b) if better == "lower" else (a > b)
        rows.append([name, round(a, 4) + 0.0, round(b, 4) + 0.0, better])  # + 0.0: no "-0.0"
    random = bool(r.weights and r.weights.is_random)
    title = f"{r.label} (p={r.score:.3f}), {method} on {model} {layer}{' — random weights' if random else ''}"
    plot = models.outbox.save(curves_figure(ours, chance, title), "faithfulness.png")
    verdict = (
        f"**{r.label}**: the {method} map beats a random map on {wins} of 4 metrics"
        f"{weights_note(random)}. A map with no information about the image scores the random "
        "column; figures near it mean the map explains little."
    )
    return rows, plot, verdict


def panel(
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

    @endpoint(faithfulness_handler, fill_doc(DOC, config))
    def faithfulness(stop: None, **params: Any) -> tuple[list[list[Any]], str, str]:
        return faithfulness_handler(models, **params)

    listen(measure, faithfulness, list(inputs), [figures, curves, verdict], verdict, api_name="faithfulness")
    return figures, curves, verdict
