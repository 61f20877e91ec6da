"""The faithfulness panel under the Grad-CAM tab: how the class probability follows the map, beside a
random map on the map's grid and a centre blob (:func:`nstcam.metrics.faithfulness`), and its
``/faithfulness`` endpoint."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import gradio as gr

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.cam_limits import cam_request
from nstcam.app.guard.cost import faithfulness_curves, faithfulness_steps
from nstcam.app.plots import curves_figure
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, in_thread, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tools import fill_doc
from nstcam.cam import arch_kind
from nstcam.metrics.registry import FAITHFULNESS_FIGURES, better_word

__all__ = ["DOC", "faithfulness_handler", "panel"]

DOC = """How faithful is a Grad-CAM map? Perturbs the photo by the top class's map and watches the
class probability (confidence change, deletion and insertion AUC, ROAD), beside the same figures for
two maps that know nothing of the photo: a random map on the map's own grid, and a blob at the
centre (where photographers put subjects). A map whose figures are near theirs explains little.
Costs {passes} forward passes.

Args:
    image: the photo: {image}.
    model: the classifier, one of {archs} (default resnet50).
    layer: the layer the map is read at; empty (default): the model's default.
    method: one of {methods} (default gradcam).
    aug_smooth: average the maps of 6 augmentations of the photo (default false).
    eigen_smooth: the first principal component of the weighted activations (default false).

Returns:
    faithfulness: a table of metric, this map, random map, centre blob and which direction is better.
    curves: a plot of the deletion and insertion curves of the three maps.
    verdict: a sentence: on how many of the 4 metrics the map beats the random map and the centre blob.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


_FIGURES = tuple((m.key, m.what, better_word(m)) for m in FAITHFULNESS_FIGURES)
"""(figure, what it measures, which way is better), read from :data:`nstcam.metrics.METRICS`."""


@zerogpu.task
def _measured(
    models: Models, put: Any, stop: Any, key: tuple[str, str, str], img: Any, **options: Any
) -> Any:
    """The top class's map and its faithfulness curves (on ZeroGPU in its worker); ends at the next
    curve step once ``stop`` is set."""
    return models.cam(*key).explain(img, should_stop=stop.is_set, **options)


def faithfulness_handler(
    models: Models,
    image: Any,
    model: str = "resnet50",
    layer: str = "",
    method: str = "gradcam",
    aug_smooth: bool = False,
    eigen_smooth: bool = False,
    stop: Any = None,
) -> tuple[list[list[Any]], str, str]:
    """How faithful the top-1 class's map is: (table rows [metric, this map, random map, centre blob,
    better], curves figure file, verdict). Runs only on request: it costs about ``6 * steps + 66``
    forward passes, the three maps' together (steps: 10 on CPU, 20 on GPU)."""
    cfg = models.config
    try:
        if arch_kind(model) != "classifier":
            raise refuse(
                f"faithfulness measures a classifier's class probability; {model} is a {arch_kind(model)}: "
                "pick a classifier"
            )
        img, key, cost = cam_request(
            models, image, model, layer, method, 1, aug_smooth, endpoint="faithfulness"
        )
        options = dict(
            top_k=1,
            max_side=cfg.display_size,
            evaluate=True,
            evaluate_steps=faithfulness_steps(cfg),
            aug_smooth=bool(aug_smooth),
            eigen_smooth=bool(eigen_smooth),
        )
        seconds = zerogpu.gpu_seconds(cost, cfg)
        (r,) = zerogpu.call(
            _measured, models, stop or threading.Event(), seconds, key=key, img=img, **options
        )
    except Exception as e:
        raise fail(e) from e
    ours, chance, centre = r.faithfulness, r.baseline, r.centre
    rows, wins, wins_centre = [], 0, 0
    for key, name, better in _FIGURES:
        a, b, c = getattr(ours, key), getattr(chance, key), getattr(centre, key)
        wins += (a < b) if better == "lower" else (a > b)
        wins_centre += (a < c) if better == "lower" else (a > c)
        rows.append([name, *(round(v, 4) + 0.0 for v in (a, b, c)), better])  # + 0.0: no "-0.0"
    random = bool(r.weights and r.weights.is_random)
    title = f"{r.label} (p={r.score:.3f}), {method} on {model} {layer}{' — random weights' if random else ''}"
    plot = models.outbox.save(curves_figure(ours, chance, title, centre), "faithfulness.png")
    verdict = (
        f"**{r.label}**: the {method} map beats a random map on {wins} of 4 metrics and a centre blob "
        f"on {wins_centre}{weights_note(random)}. Maps with no information about the image score the "
        "random and centre columns; figures near them mean the map explains little."
    )
    return rows, plot, verdict


def panel(
    config: AppConfig, models: Models, runs: Runs, *inputs: gr.components.Component
) -> tuple[gr.components.Component, ...]:
    """The panel under the Grad-CAM tab and its ``/faithfulness`` endpoint; returns its outputs
    (figures, curves, verdict)."""
    cost = f"about {faithfulness_curves(config)} forward passes of the model"  # as the handler measures
    with gr.Accordion("How faithful is this map?", open=False, elem_id="cam-faithfulness"):
        gr.Markdown(
            "Perturbs the image by the top-1 class's map and watches the class probability, beside "
            "a random map's figures (drawn on the map's grid) and a centre blob's "
            f"({cost}; computed only when you ask)."
        )
        with gr.Row():
            measure = gr.Button("Measure faithfulness", elem_id="cam-measure")
            cancel = gr.Button("Cancel", variant="stop", elem_id="cam-measure-cancel")
        verdict = gr.Markdown(label="Verdict")
        figures = gr.Dataframe(
            headers=["metric", "this map", "random map", "centre blob", "better when"],
            label="Faithfulness",
            wrap=True,
            elem_id="cam-metrics",
        )
        curves = gr.Image(label="Curves", type="filepath", elem_id="cam-curves")  # deletion, insertion

    @endpoint(faithfulness_handler, fill_doc(DOC, config), runs=(runs, "faithfulness"))
    def faithfulness(stop: threading.Event, **params: Any) -> Iterator[tuple[Any, ...]]:
        yield gr.skip(), gr.skip(), gr.skip()
        try:
            for _ in (
                result := Result(
                    in_thread(lambda put: faithfulness_handler(models, **params, stop=stop), stop)
                )
            ):
                pass
        except Exception as e:
            raise fail(e) from e
        yield result.value

    listen(measure, faithfulness, list(inputs), [figures, curves, verdict], verdict, api_name="faithfulness")
    cancel_on(cancel, runs, "faithfulness")
    return figures, curves, verdict
