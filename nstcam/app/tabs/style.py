"""The "Style transfer" tab: its handler (a plain function over :meth:`nstcam.StyleTransfer.stylize`),
its layout, and its ``/stylize`` endpoint with the tool doc."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from nstcam._mark import is_random
from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import (
    STYLE_SECONDS_PER_PIXEL_STEP,
    STYLE_SETUP_SECONDS,
    Cost,
    request_cost,
    style_pixel_steps,
)
from nstcam.app.guard.inputs import (
    SafeEditor,
    SafeFile,
    SafeImage,
    editor_mask,
    load_upload,
    warn_bad_uploads,
)
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
from nstcam.app.widgets import as_files, before_after, first_size_steps, pickers, sample, size_steps
from nstcam.fast import N_STYLES, LearnedStyle
from nstcam.style import Cancelled, StyleOptions, stylize_defaults
from nstcam.style.losses import REGISTRY as STYLE_LOSSES
from nstcam.style.options import INITS, auto_scales, split_steps

__all__ = ["DOC", "MODES", "STARTING", "fast_handler", "stylize_handler", "tab"]

STARTING = "starting: building targets…"
MODES = ("optimise", "fast")
"""``mode``: the optimisation (from the fast painting with ``init`` "fast"), or one pass of a
pretrained network."""
DEFAULTS = stylize_defaults()
"""The engine's defaults, which the endpoint, its form and its description share."""


DOC = """Neural style transfer: repaints the content image in the colours and brush strokes of the
style image while keeping its layout (default mode on this server: "{style_mode}"). `mode` "optimise": Gatys et al.'s optimisation on
VGG16_bn, each step a forward and backward pass; on this {device} server: {cost}. "fast": one pass
of a pretrained feed-forward network (Magenta's arbitrary style network, real weights whatever the
VGG's), well under a second at 512 px on a CPU; the optimisation starts from that painting by default
(`init` "auto"; "fast" always). Results from random weights are labelled as such.

Args:
    content: the photo to repaint: {image}.
    style: the painting or texture whose style is transferred: {image}; null only in "fast" mode with a built-in style or a style_file.
    style_b: optional second style, blended in by `blend`: {image}; or null.
    blend: weight of style_b, 0 to 1 (0: style only).
    size: long side of the result in px, 64 to {max_size}.
    steps: optimisation steps (network evaluations), 1 to {max_steps}; more is closer to the style.
    style_weight: the style loss's weight, for experts: it overrides strength; null (default): strength's ({style_weight}).
    content_weight: strength of the content's layout, >= 0 (default {content_weight}).
    tv_weight: smoothness (total variation), >= 0 (default {tv_weight}).
    preserve_color: "off", "luminance" (keep the photo's colours) or "histogram" (recolour the style first).
    seed: random seed, >= 0; the same inputs and seed give the same image.
    optimizer: "lbfgs" (default, fewer steps) or "adam".
    tile: 0, or a tile size in px (64 to {max_size}) to optimise big outputs window by window.
    style_loss: {style_losses}.
    init: where the optimisation starts: "auto" (default: the pretrained network's painting where its weights are on this server and no region is set, else the content), "content", "noise", "style", "style_stats" (noise with the style's colour mean and covariance) or "fast" (a pretrained network's painting).
    average: 0 (default, off), or a decay below 1 such as 0.99: the result is the moving average of the steps' images (less pixel noise).
    mask_a: optional region of style (an image editor value {{"background": image, "layers": [images]}}): strokes painted on its layers (their alpha), else the background as a black and white mask (white = styled); any size. With style_b, each style keeps its own region and a style without a mask takes the rest (blend is not used); with style alone, where it goes. Elsewhere the content is kept. Or null.
    mask_b: style_b's region, as mask_a; or null.
    mode: "{style_mode}" by default on this server (the page's mode: "fast" on a CPU, "optimise" on a GPU); "optimise", "fast" (one pass of the pretrained network: uses content, style, style_b, blend, size, preserve_color, strength, builtin_a and builtin_b); "optimise" with init "fast" starts from the fast painting.
    strength: how much of the style in every mode, 0 (the photo) to 1 (default: the whole style in "fast"; in the optimisation style weight 10 from the fast painting, calibrated so that a strength moves the style about as far in both).
    builtin_a: "fast" mode: one of the 26 built-in styles (0 to 25) instead of the style image; -1 (default): the style image.
    builtin_b: "fast" mode: a built-in style (0 to 25) blended in by blend instead of style_b (built-in styles blend only with each other); -1 (default): style_b.
    style_file: "fast" mode only: a learned style (.safetensors, from /learn_style) instead of the style image; style_b blends in by blend (not the built-in styles); or null.

Returns:
    result: the stylised image (PNG).
    status: "done: WxH, N steps in S s" (or why it stopped), with a note when the weights are random.
    download_png: the same PNG as a file to download.
"""
"""The endpoint's docstring (the API's and MCP's description), this server's limits filled in."""


def _color_mode(value: bool | str | None) -> bool | str:
    """The app's dropdown ("off", "luminance", "histogram"); API callers may still send a bool."""
    if value in (None, False, "off"):
        return False
    if value is True or value in ("luminance", "histogram"):
        return value
    raise refuse(f"preserve_color must be 'off', 'luminance' or 'histogram', got {value!r}")


def stylize_handler(
    models: Models,
    content: Any,
    style: Any = None,
    style_b: Any = None,
    blend: float = 0.0,
    size: int = 384,
    steps: int = 100,
    style_weight: float | None = DEFAULTS["style_weight"],
    content_weight: float = DEFAULTS["content_weight"],
    tv_weight: float = DEFAULTS["tv_weight"],
    preserve_color: bool | str = "off",
    seed: int = 0,
    optimizer: str = "lbfgs",
    tile: int = 0,
    preview_every: int = 10,
    stop: threading.Event | None = None,
    style_loss: str = "gram",
    init: str = DEFAULTS["init"],
    average: float = 0.0,
    mask_a: Any = None,
    mask_b: Any = None,
    mode: str = "optimise",
    strength: float = 1.0,
    builtin_a: int = -1,
    builtin_b: int = -1,
    style_file: Any = None,
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """Streams (image, status, PNG path) while stylising; the last item is the result.

    ``blend`` is the weight of ``style_b`` (0 = only ``style``). ``mask_a`` and ``mask_b`` (image
    editor values: painted strokes, or an uploaded mask) give each style its region
    (``style_masks``; a missing one takes the rest, and ``blend`` is not used), or with style A
    alone its ``style_mask``. ``tile`` > 0 optimises scales
    above that many px window by window (0: whole images); ``average`` 0 is off. Setting ``stop`` (the Cancel
    button) ends the run at its next step with ``"cancelled at step N/M"``, the partial image and
    its PNG; closing the generator stops it too. ``mode`` "fast" paints in one pass of the
    pretrained network (:func:`fast_handler`); ``init`` "fast" starts the optimisation from it.
    """
    cfg = models.config
    stop = stop or threading.Event()
    if mode not in MODES:
        raise refuse(f"mode must be {', '.join(MODES)}, got {str(mode)[:40]!r}")
    if style_file and mode != "fast":
        raise refuse("style_file: a learned style paints in the Fast mode only; pick Fast")
    if mode == "fast":
        fast_args = (content, style, style_b, blend, size, preserve_color, strength)
        yield from fast_handler(models, *fast_args, builtin_a, builtin_b, style_file)
        return
    try:
        cost = _check_request(cfg, content, style, size, steps, blend, average, tile)
        content_img = load_upload(content, "content")
        styles, weights, masks = _styles_and_regions(style, style_b, blend, mask_a, mask_b)
        scales, per_scale = split_steps(int(size), int(steps))  # the steps asked, over every scale
        options = StyleOptions.of(
            style_weights=weights,
            size=int(size),
            scales=scales,
            steps=per_scale,
            style_weight=None if style_weight is None else float(style_weight),
            strength=float(strength),
            content_weight=float(content_weight),
            tv_weight=float(tv_weight),
            preserve_color=_color_mode(preserve_color),
            seed=int(seed),
            optimizer=optimizer,
            tile=int(tile) if tile else None,
            style_loss=style_loss,
            init=init,
            average=float(average) if average else False,
            preview_every=max(1, int(preview_every)),
        )
        st = models.style()
    except Exception as e:
        raise fail(e) from e
    note = weights_note(st.weights.is_random)
    seconds = zerogpu.gpu_seconds(cost, cfg)
    job = dict(content=content_img, styles=styles, options=options, masks=masks)
    yield from _optimised(models, stop, seconds, job, int(steps), note)


def _optimised(
    models: Models, stop: threading.Event, seconds: float, job: dict[str, Any], steps: int, note: str
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """The optimisation of a checked request (``job``: :func:`_optimise`'s arguments) in a worker
    thread, its previews and statuses streamed, then its outcome."""
    total = [steps]  # evaluations in all (steps x windows when tiled), from the progress

    def run(put: Callable[[Any], None]) -> Image.Image | Cancelled:
        report = progress_reporter(put, stop)

        def on_step(info: Any) -> bool:
            total[0] = info.total_steps
            return report(info)

        try:
            return zerogpu.call(_optimise, models, stop, seconds, on_step, **job)
        except Cancelled as c:
            return c

    yield None, STARTING + note, None  # at once: the first step's status comes seconds later on a CPU
    try:
        for preview, status in (result := Result(in_thread(run, stop))):
            yield preview, status + note, None
    except Exception as e:
        raise fail(e) from e
    yield _outcome(models, result.value, f"{halted(stop)} at step", total[0], note)


@zerogpu.task
def _optimise(
    models: Models,
    put: Any,
    stop: Any,
    content: Image.Image,
    styles: list,
    options: StyleOptions,
    masks: dict,
) -> Image.Image:
    """The optimisation (on ZeroGPU in its worker): puts each step's information (its preview
    image among it); stops at the next step once ``stop`` is set (raises ``Cancelled``)."""

    def on_step(info: Any) -> bool:
        put(info)
        return not stop.is_set()

    return models.style().stylize(content, styles, options, progress=on_step, **masks)


def _check_request(
    cfg: AppConfig, content: Any, style: Any, size: Any, steps: Any, blend: Any, average: Any, tile: Any
) -> Cost:
    """The optimisation's request checked before any work: both images given, its cost within the
    server's budget, each range; returns its cost."""
    if content is None or style is None:
        raise refuse("Upload a content image and at least one style image.")
    cost = request_cost("stylize", cfg, size, steps).check()
    check(blend, "blend", 0, 1)
    check(average, "average", 0, 0.9999)
    if tile:
        check(tile, "tile", 64, cfg.max_size)
    return cost


def _styles_and_regions(
    style: Any, style_b: Any, blend: float, mask_a: Any, mask_b: Any
) -> tuple[list[Image.Image], list[float], dict[str, Any]]:
    """The styles read, their blend weights, and the regions as ``stylize`` takes them: each style's
    mask (``style_masks``: ``blend`` is then not used), or style A's alone (``style_mask``)."""
    styles, weights = [load_upload(style, "style")], [1.0]
    masks = {"style_masks": [editor_mask(mask_a, "mask A"), editor_mask(mask_b, "mask B")]}
    if all(m is None for m in masks["style_masks"]):
        masks = {}
    elif style_b is None:
        if masks["style_masks"][1] is not None:
            raise refuse("Mask B is style B's region: upload style B too, or clear mask B.")
        masks = {"style_mask": masks["style_masks"][0]}
    if style_b is not None and (blend > 0 or "style_masks" in masks):
        styles.append(load_upload(style_b, "style B"))
        weights = [1.0 - blend, blend] if "style_masks" not in masks else [0.5, 0.5]
    return styles, weights, masks


def _outcome(
    models: Models, value: Image.Image | Cancelled, halted_at: str, total: int, note: str
) -> tuple[Image.Image | None, str, str | None]:
    """The run's last item: the picture, its status and its PNG (a cancelled run's partial one)."""
    if isinstance(value, Cancelled):
        img = value.image
        path = models.outbox.save(img, "stylized_partial.png") if img is not None else None
        return img, f"{halted_at} {len(value.history)}/{total}" + note, path
    meta = value.info["nstcam"]
    status = (
        f"done: {value.width}x{value.height}, {count(len(meta['history']), 'step')}"
        f"{_per_scale(meta['params'])} in "
        f"{meta['seconds']:.1f} s, seed {meta['params']['seed']}"
        + (", a style per region" if meta["params"].get("style_masks") else "")
        + note
    )
    return value, status, models.outbox.save(value, "stylized.png")


def _per_scale(params: dict[str, Any]) -> str:
    """ " (33 at 128 px, 17 at 256 px)": each scale's planned steps, where there are several."""
    scales, steps = params.get("scales") or [], params.get("steps") or []
    if len(scales) < 2 or len(steps) != len(scales):
        return ""
    return " (" + ", ".join(f"{n} at {side} px" for side, n in zip(scales, steps, strict=True)) + ")"


def fast_handler(
    models: Models,
    content: Any,
    style: Any,
    style_b: Any,
    blend: float,
    size: int,
    preserve_color: Any,
    strength: float = 1.0,
    builtin_a: int = -1,
    builtin_b: int = -1,
    style_file: Any = None,
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """``mode="fast"``: one pass of a pretrained network (:class:`nstcam.FastStyle`, real weights):
    Magenta's arbitrary network for paintings (style B blended in by its style vector), the 26-style
    network for built-in styles (``builtin_a``, ``builtin_b``: 0-25, -1 none; blended by their
    weights), or a learned style (``style_file``, from the "Learn a style" tab: checked on reading);
    ``strength`` 0 to 1; yields (image, status, PNG path) once."""
    try:
        check(size, "size", 64, models.config.max_size)
        check(blend, "blend", 0, 1)
        check(strength, "strength", 0, 1)
        check(builtin_a, "builtin_a", -1, N_STYLES - 1)
        check(builtin_b, "builtin_b", -1, N_STYLES - 1)
        colour = _color_mode(preserve_color)
        if content is None:
            raise refuse("Upload a content image.")
        content_img = load_upload(content, "content")
        if style_file:
            painting = _learned_file(style_file, style_b, blend, int(builtin_a), int(builtin_b))
        else:
            painting = _fast_style(style, style_b, blend, int(builtin_a), int(builtin_b))
        img, seconds = zerogpu.call(
            _paint,
            models,
            threading.Event(),
            zerogpu.ONE_PASS_SECONDS,
            content=content_img,
            painting=painting,
            strength=float(strength),
            size=int(size),
            preserve_color="luminance" if colour is True else colour or None,
        )
    except Exception as e:
        raise fail(e) from e
    net = "the 26-style network" if builtin_a >= 0 and not style_file else "Magenta's arbitrary network"
    net += " (real weights)"
    if style_file:
        net += ", a learned style" + (", learned on RANDOM VGG weights" if is_random(img) else "")
    status = f"done: {img.width}x{img.height} in {seconds:.2f} s, {net}, strength {strength:g}"
    yield img, status, models.outbox.save(img, "stylized.png")


@zerogpu.task
def _paint(models: Models, put: Any, stop: Any, content: Image.Image, painting: Any, **options: Any) -> Any:
    """The fast network's pass (on ZeroGPU in its worker): ``painting`` as :func:`_fast_style` or
    :func:`_learned_file` gave it (``("vector", paintings, weights)`` and ``("blend", styles,
    weights)`` blended here, on the network); returns (image, seconds)."""
    fast = models.fast()
    if isinstance(painting, tuple):
        how, styles, weights = painting
        painting = fast.blend_vector(styles, weights) if how == "vector" else fast.blend(styles, weights)
    t = time.perf_counter()
    img = fast.stylize(content, painting, **options)
    return img, time.perf_counter() - t


def _fast_style(style: Any, style_b: Any, blend: float, a: int, b: int) -> Any:
    """What the fast engine paints with: built-in styles as their weights ({a: 1 - blend, b: blend}),
    paintings as their blended style vector (``("vector", paintings, weights)``, blended by
    :func:`_paint`); a built-in and a painting do not blend (two networks)."""
    if a >= 0:
        if style_b is not None and blend > 0 and b < 0:
            raise refuse(
                "builtin_b: a built-in style blends only with another built-in style (a painting runs on "
                "another network); pick a built-in style B, or set blend to 0"
            )
        return {a: 1.0 - blend, b: blend} if b >= 0 and blend > 0 and b != a else a
    if b >= 0 and blend > 0:
        raise refuse("builtin_b: a built-in style blends only with a built-in style A; pick one for A too")
    if style is None:
        raise refuse("Upload a style image, or pick a built-in style.")
    painting = load_upload(style, "style")
    if style_b is None or blend <= 0:
        return painting  # one painting as an image: strength and histogram colours read it per photo
    return "vector", [painting, load_upload(style_b, "style B")], [1.0 - blend, blend]


def _learned_file(style_file: Any, style_b: Any, blend: float, a: int, b: int) -> Any:
    """A learned style's file read and checked (names, shapes, dtype, values, size; whatever its
    name: an MCP client's upload has none of its own), style B blended in by ``blend``
    (``FastStyle.blend``, by :func:`_paint`: ``("blend", styles, weights)``); the built-in styles
    run on another network and do not blend with it."""
    if a >= 0 or b >= 0:
        raise refuse("style_file: a learned style does not blend with the built-in styles; set them to none")
    learned = LearnedStyle.load(Path(str(style_file)))
    if style_b is None or blend <= 0:
        return learned
    return "blend", [learned, load_upload(style_b, "style B")], [1.0 - blend, blend]


BUILTIN_CHOICES = [("none: the image", -1)] + [(f"{k}", k) for k in range(N_STYLES)]
"""The 26 built-in styles by index (docs/fast_styles.png shows them), or none (the style image)."""


def mode_estimate(config: AppConfig, size: float = 384, steps: float = 100) -> str:
    """What the modes will cost at ``size`` (a 3:2 photo's long side) and ``steps``, shown before a
    run: Fast's one pass, and the optimisation's steps at this device's measured rate (on a GPU,
    not measured yet: no figure is guessed)."""
    size, steps = int(size or 384), int(steps or 100)
    rate = STYLE_SECONDS_PER_PIXEL_STEP.get(config.torch_device.type)
    where = config.torch_device.type.upper()
    halves = " and at half that" if len(auto_scales(size)) > 1 else ""
    slow = f"Optimise: {steps} steps at {size} px{halves}"
    if rate is None:
        return f"Fast: under a second. {slow}: not measured on a {where} yet."
    seconds = STYLE_SETUP_SECONDS.get(config.torch_device.type, 0.0) + rate * style_pixel_steps(
        size, steps
    ) * (2 / 3)
    return f"Fast: under a second. {slow}: about {_duration(seconds)} on this {where} server (a 2-core CPU's rate)."


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _mode_controls(mode: str) -> tuple[Any, ...]:
    """What each mode reads: Fast its strength and built-in styles, not the steps, the optimisation
    settings or the regions; the optimisation modes the reverse."""
    fast = mode == "fast"
    return (
        gr.Row(visible=fast),
        gr.Slider(visible=not fast),
        gr.Accordion(visible=not fast),
        gr.Accordion(visible=not fast),
    )


def tab(config: AppConfig, models: Models, runs: Runs, demo: gr.Blocks) -> None:
    """The "Style transfer" tab and its ``/stylize`` endpoint."""
    with gr.Row():
        with gr.Column():
            ui = _choices(config)
        with gr.Column():
            ui.update(_results())
    gr.Examples(
        [
            [sample("chelsea.png"), sample("hubble_deep_field.jpg")],
            [sample("astronaut.png"), sample("brick.png")],
        ],
        inputs=[ui["content"], ui["style_a"]],
    )
    _wire(config, models, runs, ui)


def _choices(config: AppConfig) -> dict[str, Any]:
    """The left column: the pictures, the mode, what every mode takes, then each mode's own controls."""
    with gr.Row():
        content, style_a = pickers("st", "Style A")
        style_b = SafeImage(
            label="Style B (optional)",
            sources=["upload", "clipboard"],
            height=200,
            elem_id="st-style-b",
        )
    mode = gr.Radio(
        [("Fast", "fast"), ("Optimise", "optimise")],  # one optimisation: its start is "Start from"
        value=config.style_mode,  # the API's default too (view_api says it): Fast on a CPU server
        label="Mode",
        info="Fast: a pretrained network, under a second (real weights); Optimise: Gatys et al. "
        "on VGG16_bn, any style and every setting below",
        elem_id="st-mode",
    )
    estimate = gr.Markdown(mode_estimate(config, *first_size_steps(config)), elem_id="st-estimate")
    with gr.Row():
        run = gr.Button("Stylise", variant="primary", elem_id="st-run")
        cancel = gr.Button("Cancel", variant="stop", elem_id="st-cancel")
    strength = gr.Slider(
        0,
        1,
        value=DEFAULTS["strength"],
        step=0.05,
        label="Strength (0: the photo, 1: the whole style), every mode",
        info="Fast: the style vector's share; the optimisation: its style weight (docs/style.md)",
        elem_id="st-strength",
    )
    blend = gr.Slider(0, 1, value=0.0, step=0.05, label="Blend: weight of style B")
    preserve = gr.Dropdown(
        ["off", "luminance", "histogram"],
        value="off",
        allow_custom_value=True,  # API clients of the checkbox era may still send true/false
        label="Preserve content colours",
        info="luminance: the content's chroma back; histogram: the style recoloured first",
    )
    ui = dict(content=content, style_a=style_a, style_b=style_b, mode=mode, run=run, cancel=cancel)
    ui.update(blend=blend, preserve=preserve, estimate=estimate, strength=strength)
    ui.update(**_fast_controls(), **_regions(config))
    ui["size"], ui["steps"] = size_steps(config)
    ui.update(_advanced())
    fast = config.style_mode == "fast"  # the controls the opening mode reads, as _mode_controls shows them
    ui["fast_row"].visible = fast
    for name in ("steps", "advanced", "regions"):
        ui[name].visible = not fast
    return ui


def _fast_controls() -> dict[str, Any]:
    """Fast mode's own row (hidden in the others): the built-in styles."""
    with gr.Row(visible=False, elem_id="st-fast-row") as fast_row:
        builtin_a = gr.Dropdown(
            BUILTIN_CHOICES,
            value=-1,
            label="Built-in style A (instead of the image)",
            elem_id="st-builtin-a",
        )
        builtin_b = gr.Dropdown(
            BUILTIN_CHOICES, value=-1, label="Built-in style B (blended in)", elem_id="st-builtin-b"
        )
        style_file = SafeFile(
            "style file",
            label="Learned style (.safetensors, from Learn a style)",
            file_types=[".safetensors"],
            elem_id="st-style-file",
        )
    return dict(fast_row=fast_row, builtin_a=builtin_a, builtin_b=builtin_b, style_file=style_file)


def _regions(config: AppConfig) -> dict[str, Any]:
    """The optimisation's regions: a mask per style, painted or uploaded."""
    with gr.Accordion("Regions: a mask per style (optional)", open=False) as regions:
        gr.Markdown(
            "Paint where each style goes, or upload a black and white mask (white = styled). "
            "With style B, each style keeps its own region (blend is not used) and a style "
            "without a mask takes the rest; where no mask reaches, the content is kept."
        )
        with gr.Row():
            mask_a, mask_b = (
                SafeEditor(
                    config.max_frame_pixels,
                    label=f"Mask {k}",
                    sources=["upload", "clipboard"],
                    height=260,
                    elem_id=f"st-mask-{k.lower()}",
                    brush=gr.Brush(colors=["#ffffff"]),
                )
                for k in "AB"
            )
    return dict(regions=regions, mask_a=mask_a, mask_b=mask_b)


def _advanced() -> dict[str, Any]:
    """The optimisation's settings, folded: loss weights, seed, tile, optimiser, loss, start, average."""
    with gr.Accordion("Advanced", open=False) as advanced:
        ui = dict(
            advanced=advanced,
            style_strength=gr.Number(
                DEFAULTS["style_weight"],
                label="Style weight (experts; empty: from the strength)",
                minimum=0,
            ),
            content_strength=gr.Number(DEFAULTS["content_weight"], label="Content strength", minimum=0),
            smoothness=gr.Number(DEFAULTS["tv_weight"], label="Smoothness (total variation)", minimum=0),
            seed=gr.Number(0, label="Seed", precision=0, minimum=0),
            tile=gr.Number(
                0,
                label="Tile (px; 0 = whole image)",
                info="optimise big outputs window by window: memory follows the tile",
                precision=0,
                minimum=0,
            ),
            optimizer=gr.Radio(["lbfgs", "adam"], value="lbfgs", label="Optimiser"),
            style_loss=gr.Radio(
                list(STYLE_LOSSES),
                value="gram",
                label="Style loss",
                info="; ".join(f"{name}: {loss.summary}" for name, loss in STYLE_LOSSES.items()),
            ),
            init=gr.Dropdown(
                list(INITS),
                value=DEFAULTS["init"],
                label="Start from",
                info="auto: the pretrained network's painting where its weights are here and no "
                "region is set, else the content; style_stats: noise with the style's colour mean "
                "and covariance; fast: the pretrained network's painting",
            ),
            average=gr.Number(
                0,
                label="Average the steps (decay; 0 = off)",
                minimum=0,
                maximum=0.9999,
                info="e.g. 0.99: the result is the moving average of the steps' images",
            ),
        )
    return ui


def _results() -> dict[str, Any]:
    """The right column: the result, its status, its PNG and the before/after slider."""
    return dict(
        result=SafeImage(  # read by the slider's step (an input there): checked as uploads are
            label="Result", format="png", elem_id="st-result", interactive=False
        ),
        status=gr.Textbox(label="Status", interactive=False, elem_id="st-status"),
        download=gr.File(label="Download PNG", elem_id="st-download"),
        slider=gr.ImageSlider(
            label="Before / after (drag)", type="filepath", elem_id="st-slider", max_height=420
        ),
    )


_INPUTS = (
    *("content", "style_a", "style_b", "blend", "size", "steps", "style_strength", "content_strength"),
    *("smoothness", "preserve", "seed", "optimizer", "tile", "style_loss", "init", "average"),
    *("mask_a", "mask_b", "mode", "strength", "builtin_a", "builtin_b", "style_file"),
)
"""The ``/stylize`` endpoint's inputs, in its parameters' order (new ones only ever at the end)."""


def _wire(config: AppConfig, models: Models, runs: Runs, ui: dict[str, Any]) -> None:
    """The tab's events: the uploads checked, the mode's controls shown, Stylise and Cancel."""
    status = ui["status"]
    warn_bad_uploads(
        [(ui["content"], "content"), (ui["style_a"], "style A"), (ui["style_b"], "style B")], status
    )
    ui["mode"].change(
        _mode_controls,
        ui["mode"],
        [ui["fast_row"], ui["steps"], ui["advanced"], ui["regions"]],
        api_name=False,
        show_progress="hidden",
    )
    for source in (ui["size"], ui["steps"]):  # the estimate before a run, as they change
        source.change(
            lambda size, steps: mode_estimate(config, size, steps),
            [ui["size"], ui["steps"]],
            ui["estimate"],
            api_name=False,
            show_progress="hidden",
        )

    @endpoint(stylize_handler, fill_doc(DOC, config), runs=(runs, "stylize"))
    def stylize(stop: threading.Event, **params: Any) -> Iterator[tuple[Any, str, str | None]]:
        saved: dict = {}
        for image, status, png in stylize_handler(models, **params, stop=stop):  # the result's PNG as is
            yield png or as_files(models.outbox, image, saved), status, png

    listen(
        ui["run"],
        stylize,
        [ui[name] for name in _INPUTS],
        [ui["result"], status, ui["download"]],
        status,
        api_name="stylize",
        trigger_mode="always_last",  # a click while the cancelled run winds down starts right after
    ).then(
        lambda content, result: before_after(models.outbox, content, result),
        [ui["content"], ui["result"]],
        ui["slider"],
        api_name=False,
    )

    cancel_on(ui["cancel"], runs, "stylize")
