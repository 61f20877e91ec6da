"""The trust panel under the Grad-CAM tab: several methods on the photo at hand, each scored for
faithfulness, sanity (model randomisation), stability, sparseness and, given a box, localisation, with
its cost (:meth:`nstcam.GradCAM.trust`); its ``/trust`` endpoint (and MCP tool)."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gradio as gr

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.cam_limits import cam_model, image_size
from nstcam.app.guard.cost import MAX_TRUST_METHODS, request_cost, trust_settings
from nstcam.app.guard.inputs import load_upload
from nstcam.app.guard.limits import MAX_BOX_CHARS
from nstcam.app.run import zerogpu
from nstcam.app.run.listen import listen
from nstcam.app.run.running import Result, cancel_on, endpoint, fail, in_thread, weights_note
from nstcam.app.run.runs import Runs
from nstcam.app.tools import fill_doc, method_choices
from nstcam.cam import METHODS, arch_kind
from nstcam.cam.trust import TrustReport, trust_passes

__all__ = ["APP_METHODS", "DOC", "panel", "trust_handler"]

APP_METHODS = ("gradcam", "gradcam++", "layercam", "eigencam", "randomcam")
"""The panel's first choice: three gradient methods, a gradient-free one and a map that knows nothing."""

DOC = """Can these maps be trusted? Runs several CAM methods on the photo (its top-1 class) and scores each:
deletion and insertion AUC and faithfulness correlation (does the map say what moves the class
probability?), randomisation (Spearman rank correlation with the map of the same model whose top layer
is re-initialised: near 1 means the map reads the photo, not what the model learnt; Adebayo et al.
2018), sensitivity (largest relative change under tiny noise), sparseness (Gini index) and, given a
box, energy inside it and the pointing game. Ranks tie where values are equal; cost per map beside.
One request costs at most {scorecam} forward passes here (about {trust_passes} per gradient method).

Args:
    image: the photo: {image}.
    model: the classifier, one of {archs} (default resnet50).
    layer: the layer the maps are read at; empty (default): the model's default.
    methods: 1 to {max_methods} of {methods} (default {app_methods}); Score-CAM and co. cost a masked image per channel for each of their maps.
    box: where the object is, "x1, y1, x2, y2" in the photo's pixels, for the localisation metrics; empty (default): none.

Returns:
    trust: a table, a method per row: each metric's value and rank (#1 is best), then seconds and peak MB per map.
    files: the table as CSV and as markdown.
    verdict: which methods lead, and which fail the randomisation sanity check.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


def _doc(config: AppConfig) -> str:
    fields = {
        "{trust_passes}": str(_gradient_passes(config)),
        "{max_methods}": str(MAX_TRUST_METHODS),
        "{app_methods}": ", ".join(APP_METHODS),
    }
    doc = DOC
    for key, value in fields.items():
        doc = doc.replace(key, value)
    return fill_doc(doc, config)


def _gradient_passes(config: AppConfig) -> int:
    """Forward passes a gradient method adds to the report (its maps at 2 passes each, its metrics)."""
    return trust_passes([2], 1, **trust_settings(config)) - 1


@zerogpu.task
def _report(models: Models, put: Any, stop: Any, key: tuple[str, str, str], img: Any, **options: Any) -> Any:
    """The trust report of one photo (on ZeroGPU in its worker): puts the forward passes done; asks
    ``stop`` before every pass."""
    return models.cam(*key).trust([img], should_stop=stop.is_set, progress=put, **options)


def trust_handler(
    models: Models,
    image: Any,
    model: str = "resnet50",
    layer: str = "",
    methods: list[str] = list(APP_METHODS),  # noqa: B006 - read only: the API's and the page's default
    box: str = "",
    stop: Any = None,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[dict[str, Any], list[str], str]:
    """The trust report of ``methods`` on one photo: (table, [CSV file, markdown file], verdict).
    Checked before any model is built: a classifier, the methods (at most
    :data:`nstcam.app.guard.cost.MAX_TRUST_METHODS`), the box, the cost (:func:`nstcam.app.guard.cost.trust_cost`).
    ``stop`` (a cancel flag with the request's deadline) is asked before every forward pass;
    ``progress(done, total)`` told the passes done of the estimate."""
    cfg = models.config
    try:
        if arch_kind(model) != "classifier":
            raise refuse(
                f"the trust report reads a classifier's class probability; {model} is a "
                f"{arch_kind(model)}: pick a classifier"
            )
        chosen = _methods(methods)
        corners = _box(box)
        layer = cam_model(models, image, model, layer)
        cost = request_cost("trust", cfg, model, layer, chosen, image_size(image, model)).check()
        img = load_upload(image, "image")
        if corners is not None and (
            corners[0] >= img.width or corners[1] >= img.height or min(corners[2:]) <= 0
        ):
            raise refuse(f"box {box.strip()[:40]!r} lies outside the photo ({img.width} x {img.height} px)")
        cam = models.cam(model, layer, "gradcam")
        total = int(cost.units)
        report = zerogpu.call(
            _report,
            models,
            stop or threading.Event(),
            zerogpu.gpu_seconds(cost, cfg),
            None if progress is None else lambda done: progress(min(done, total), total),
            key=(model, layer, "gradcam"),
            img=img,
            methods=chosen,
            boxes=None if corners is None else [corners],
            **trust_settings(cfg),
        )
    except Exception as e:
        raise fail(e) from e
    head, rows = report.table()
    files = [_save(models, report.csv(), "trust.csv"), _save(models, report.markdown() + "\n", "trust.md")]
    random = bool(cam.weights and cam.weights.is_random)
    return {"headers": head, "data": rows}, files, verdict(report, model, layer) + weights_note(random)


def _methods(methods: Any) -> list[str]:
    if isinstance(methods, str) or not isinstance(methods, Sequence):
        raise refuse(f"methods must be a list of method names, got {type(methods).__name__}")
    if not 1 <= len(methods) <= MAX_TRUST_METHODS:
        raise refuse(f"methods must hold 1 to {MAX_TRUST_METHODS} methods on this server, got {len(methods)}")
    for m in methods:
        if m not in METHODS:
            raise refuse(f"methods must be among {', '.join(METHODS)}, got {str(m)[:40]!r}")
    return list(dict.fromkeys(methods))


def _box(box: Any) -> tuple[float, ...] | None:
    """``"x1, y1, x2, y2"`` as four numbers; empty: None."""
    if box is None or (isinstance(box, str) and not box.strip()):
        return None
    if not isinstance(box, str) or len(box) > MAX_BOX_CHARS:
        raise refuse(
            f'box must be "x1, y1, x2, y2" in the photo\'s pixels, at most {MAX_BOX_CHARS} characters'
        )
    parts = [p for p in re.split(r"[,\s]+", box.strip()) if p]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if (
        len(values) != 4
        or values[2] <= values[0]
        or values[3] <= values[1]
        or not all(map(math.isfinite, values))
    ):
        raise refuse(
            f'box must be "x1, y1, x2, y2" in the photo\'s pixels with x2 > x1 and y2 > y1, got {box[:40]!r}'
        )
    return values


def _save(models: Models, text: str, name: str) -> str:
    path = models.outbox.reserve(name)
    path.write_text(text)
    return str(path)


def verdict(report: TrustReport, model: str, layer: str) -> str:
    """Which methods lead the most metrics, and which fail the randomisation check (Spearman 0.9 or
    more with the randomised model's map)."""
    if not report.methods:
        return f"No method could run on {model} {layer}: " + "; ".join(
            f"{m}: {w}" for m, w in report.failed.items()
        )
    wins = {m: sum(report.stats[m][k][3] == 1 for k in report.metrics) for m in report.methods}
    best = max(wins.values())
    leaders = [m for m, w in wins.items() if w == best]
    blind = [m for m in report.methods if report.stats[m]["randomisation"][0] >= 0.9]
    said = (
        f"On {model} {layer}, **{', '.join(leaders)}** {'ranks' if len(leaders) == 1 else 'rank'} first on "
        f"{best} of {len(report.metrics)} metrics "
        f"(one photo: a value each, no interval; `nstcam cam --trust` takes a folder)."
    )
    if blind:
        said += (
            f" **{', '.join(blind)}** barely change when the model's top layer is random "
            "(Spearman 0.9 or more): they show the photo more than what the model learnt."
        )
    return said


def panel(
    config: AppConfig,
    models: Models,
    runs: Runs,
    image: gr.components.Component,
    arch: gr.components.Component,
    layer: gr.components.Component,
) -> tuple[gr.components.Component, ...]:
    """The panel under the Grad-CAM tab and its ``/trust`` endpoint; returns its outputs (table,
    files, verdict)."""
    with gr.Accordion("Can these maps be trusted?", open=False, elem_id="cam-trust"):
        gr.Markdown(
            "Several methods on this photo, each scored for faithfulness, sanity (does the map change "
            "when the model's top layer is random?), stability, sparseness and, given a box, localisation, "
            f"with its cost (about {_gradient_passes(config)} forward passes per gradient method; computed "
            "only when you ask)."
        )
        with gr.Row():
            methods = gr.Dropdown(
                method_choices(),
                value=list(APP_METHODS),
                multiselect=True,
                max_choices=MAX_TRUST_METHODS,
                label=f"Methods (at most {MAX_TRUST_METHODS})",
                elem_id="cam-trust-methods",
            )
            box = gr.Textbox(
                "",
                label="Object box: x1, y1, x2, y2 (optional)",
                max_length=MAX_BOX_CHARS,
                elem_id="cam-trust-box",
            )
        with gr.Row():
            run = gr.Button("Compare methods", elem_id="cam-trust-run")
            cancel = gr.Button("Cancel", variant="stop", elem_id="cam-trust-cancel")
        said = gr.Markdown(label="Verdict")
        table = gr.Dataframe(label="Trust", wrap=True, elem_id="cam-trust-table")
        files = gr.File(label="Download", file_count="multiple", elem_id="cam-trust-files")

    @endpoint(trust_handler, _doc(config), runs=(runs, "trust"), progress=True)
    def trust(stop: threading.Event, progress: gr.Progress, **params: Any) -> Iterator[tuple[Any, ...]]:
        progress(0.0, desc="starting: checking the request…")

        def work(put: Any) -> Any:
            return trust_handler(models, **params, stop=stop, progress=lambda done, total: put((done, total)))

        yield gr.skip(), gr.skip(), gr.skip()
        try:
            for done, total in (result := Result(in_thread(work, stop))):
                progress(done / total, desc=f"pass {done:,}/{total:,} (estimated)")
                yield gr.skip(), gr.skip(), gr.skip()
        except Exception as e:
            raise fail(e) from e
        yield result.value

    listen(run, trust, [image, arch, layer, methods, box], [table, files, said], said, api_name="trust")
    cancel_on(cancel, runs, "trust")
    return table, files, said
