"""The app's handlers: plain functions over the Python API, testable without a server."""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import numpy as np
import torch
from PIL import Image

from nstcam._mark import tag_weights
from nstcam.app.config import RANDOM_HINT, AppConfig, Models
from nstcam.app.errors import refuse, shorten
from nstcam.app.files import editor_mask, load_upload
from nstcam.app.found import check_found, explain_found, found_caption, found_row
from nstcam.app.plots import curves_figure
from nstcam.cam import CAM_ARCHS, METHODS, PERTURBATION_METHODS, REGISTRY, arch_kind, candidate_layers
from nstcam.cam.layers import layers
from nstcam.image import ImageError
from nstcam.style import Cancelled, InsufficientMemoryError
from nstcam.weights import WeightsUnavailableError

__all__ = [
    "CAM_STARTING",
    "STARTING",
    "cam_handler",
    "default_layer",
    "faithfulness_handler",
    "features_handler",
    "layer_choices",
    "stylize_handler",
    "subject_handler",
]

logger = logging.getLogger(__name__)

try:  # Hugging Face ZeroGPU: borrow a GPU per call; a no-op everywhere else
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU(duration=120)
except ImportError:  # pragma: no cover - depends on the environment

    def gpu(fn):
        return fn


def _fail(e: BaseException) -> gr.Error:
    """The error the user sees for ``e``: ordinary mistakes as one log line, real faults with their
    traceback (logged once, here)."""
    if isinstance(e, gr.Error):
        return e
    if isinstance(e, (ImageError, FileNotFoundError)):
        return refuse(f"Bad image: {e}")
    if isinstance(e, WeightsUnavailableError):
        return refuse(f"Model weights are missing: {e.explain(RANDOM_HINT, show_folder=False)}")
    if isinstance(e, (InsufficientMemoryError, torch.cuda.OutOfMemoryError, MemoryError)):
        return refuse(f"Out of memory: {e}. Try a smaller size.")
    if isinstance(e, ValueError):
        return refuse(str(e))
    logger.exception("unexpected error in a request")
    return gr.Error(shorten(f"Internal error ({type(e).__name__}): {e}"), print_exception=False)


def _check(value: float | None, name: str, lo: float, hi: float) -> None:
    if value is None or not lo <= value <= hi:
        raise refuse(f"{name} must be between {lo:g} and {hi:g} on this server, got {value}")


def _check_run(cfg: AppConfig, size: float | None, steps: float | None) -> None:
    """The server's limits on a style-transfer request."""
    _check(size, "size", 64, cfg.max_size)
    _check(steps, "steps", 1, cfg.max_steps)


def _count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _weights_note(random: bool) -> str:
    return " — RANDOM weights: not meaningful" if random else ""


_DONE = object()
STARTING = "starting: building targets…"
CAM_STARTING = "starting: loading the model and the image…"


def _color_mode(value: bool | str | None) -> bool | str:
    """The app's dropdown ("off", "luminance", "histogram"); API callers may still send a bool."""
    if value in (None, False, "off"):
        return False
    if value is True or value in ("luminance", "histogram"):
        return value
    raise refuse(f"preserve_color must be 'off', 'luminance' or 'histogram', got {value!r}")


def _in_thread(fn: Callable[[Callable[[Any], None]], Any], stop: threading.Event) -> Iterator[Any]:
    """Runs ``fn(put)`` in a worker thread and yields whatever it puts; returns what ``fn`` returns.

    If the consumer stops early (Gradio's cancel, a dropped connection), ``stop`` is set and the
    engine stops at its next step, by itself: nothing waits for it here, because Gradio closes a
    cancelled generator on its event loop, where a join would stall every user's requests for the
    rest of the step.
    """
    updates: queue.Queue = queue.Queue()
    outcome: dict[str, Any] = {}

    @gpu
    def work() -> None:
        try:
            outcome["value"] = fn(updates.put)
        except BaseException as e:  # noqa: BLE001 - handed to the request thread
            outcome["error"] = e
        finally:
            updates.put(_DONE)

    worker = threading.Thread(target=work, name="nstcam-run", daemon=True)
    worker.start()
    try:
        while (item := updates.get()) is not _DONE:
            yield item
    finally:
        stop.set()  # a no-op once the run is done; else it ends at its next step
    worker.join()  # it has put _DONE: returns at once
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _progress_reporter(put: Callable[[Any], None], stop: threading.Event) -> Callable[[Any], bool]:
    """Puts (image so far, "step k/N · loss") at every step the engine reports (each step on a CPU):
    the latest preview image object, the same one until the next preview."""
    last: list[Image.Image | None] = [None]

    def on_step(info: Any) -> bool:
        last[0] = info.preview if info.preview is not None else last[0]
        put((last[0], f"step {info.step}/{info.total_steps} · loss {info.losses['total']:.4g}"))
        return not stop.is_set()

    return on_step


# -- style transfer -----------------------------------------------------------------------------
def stylize_handler(
    models: Models,
    content: Any,
    style: Any,
    style_b: Any = None,
    blend: float = 0.0,
    size: int = 384,
    steps: int = 100,
    style_weight: float = 50.0,
    content_weight: float = 1.0,
    tv_weight: float = 5.0,
    preserve_color: bool | str = False,
    seed: int = 0,
    optimizer: str = "lbfgs",
    tile: int = 0,
    preview_every: int = 10,
    stop: threading.Event | None = None,
    style_loss: str = "gram",
    init: str = "content",
    average: float = 0.0,
    mask_a: Any = None,
    mask_b: Any = None,
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """Streams (image, status, PNG path) while stylising; the last item is the result.

    ``blend`` is the weight of ``style_b`` (0 = only ``style``). ``mask_a`` and ``mask_b`` (image
    editor values: painted strokes, or an uploaded mask) give each style its region
    (``style_masks``; a missing one takes the rest, and ``blend`` is not used), or with style A
    alone its ``style_mask``. ``tile`` > 0 optimises scales
    above that many px window by window (0: whole images); ``average`` 0 is off. Setting ``stop`` (the Cancel
    button) ends the run at its next step with ``"cancelled at step N/M"``, the partial image and
    its PNG; closing the generator stops it too.
    """
    cfg = models.config
    stop = stop or threading.Event()
    try:
        if content is None or style is None:
            raise refuse("Upload a content image and at least one style image.")
        _check_run(cfg, size, steps)
        _check(blend, "blend", 0, 1)
        _check(average, "average", 0, 0.9999)
        if tile:
            _check(tile, "tile", 64, cfg.max_size)
        content_img = load_upload(content, "content")
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
        st = models.style()
    except Exception as e:
        raise _fail(e) from e
    note = _weights_note(st.weights.is_random)
    total = [int(steps)]  # evaluations in all (steps x windows when tiled), from the progress

    def run(put: Callable[[Any], None]) -> Image.Image | Cancelled:
        report = _progress_reporter(put, stop)

        def on_step(info: Any) -> bool:
            total[0] = info.total_steps
            return report(info)

        try:
            return st.stylize(
                content_img,
                styles,
                style_weights=weights,
                size=int(size),
                steps=int(steps),
                style_weight=float(style_weight),
                content_weight=float(content_weight),
                tv_weight=float(tv_weight),
                preserve_color=_color_mode(preserve_color),
                seed=int(seed),
                optimizer=optimizer,
                tile=int(tile) if tile else None,
                style_loss=style_loss,
                init=init,
                average=float(average) if average else False,
                progress=on_step,
                **masks,
                preview_every=max(1, int(preview_every)),
            )
        except Cancelled as c:
            return c

    yield None, STARTING + note, None  # at once: the first step's status comes seconds later on a CPU
    try:
        for preview, status in (result := _Result(_in_thread(run, stop))):
            yield preview, status + note, None
    except Exception as e:
        raise _fail(e) from e
    if isinstance(result.value, Cancelled):
        img = result.value.image
        path = models.outbox.save(img, "stylized_partial.png") if img is not None else None
        yield img, f"cancelled at step {len(result.value.history)}/{total[0]}" + note, path
        return
    img = result.value
    meta = img.info["nstcam"]
    status = (
        f"done: {img.width}x{img.height}, {_count(len(meta['history']), 'step')} in {meta['seconds']:.1f} s, "
        f"seed {meta['params']['seed']}"
        + (", a style per region" if meta["params"].get("style_masks") else "")
        + note
    )
    yield img, status, models.outbox.save(img, "stylized.png")


class _Result:
    """Iterates a generator and keeps what it returns (``value``)."""

    def __init__(self, gen: Iterator[Any]) -> None:
        self._gen = gen
        self.value: Any = None

    def __iter__(self) -> Iterator[Any]:
        self.value = yield from self._gen


# -- Grad-CAM -----------------------------------------------------------------------------------
@functools.cache
def _meta_layers(arch: str) -> dict[str, int]:
    """Valid target layers of a known classifier and their channels, read from an untrained skeleton
    (the meta device where it builds there: no weights, no memory)."""
    from nstcam.cam.layers import arch_spec, skeleton
    from nstcam.hooks import HookManager

    net = skeleton(arch)
    names, side = candidate_layers(net), arch_spec(net).square or 224
    device = next(net.parameters()).device
    with torch.no_grad(), HookManager(net, names, detach=True) as hooks:
        rec = hooks.run(torch.empty(1, 3, side, side, device=device))
    out = {}
    for name in names:
        t = rec.get(name)
        if isinstance(t, torch.Tensor) and t.ndim in (3, 4):
            out[name] = int(t.shape[-1]) if t.ndim == 3 else _channels(t, side)  # tokens: (N, T, C)
    return out


def _channels(t: torch.Tensor, side: int) -> int:
    """Channels of a 4-D activation: (N, C, h, w), or (N, h, w, C) when only that reads as a grid."""
    from nstcam.layouts import LayoutError, detect_layout

    try:
        return int(t.shape[3] if detect_layout(tuple(t.shape), side, side) == "nhwc" else t.shape[1])
    except LayoutError:
        return int(t.shape[1])


def default_layer(arch: str) -> str:
    """The target layer Grad-CAM uses for ``arch`` when none is chosen."""
    from nstcam.cam.layers import arch_spec, skeleton

    return arch_spec(skeleton(arch)).default_layer


def layer_choices(arch: str) -> list[str]:
    """Valid target layers of a known model (no weights, no memory)."""
    if arch_kind(arch) != "classifier":
        return layers(arch)
    if arch not in CAM_ARCHS:
        raise refuse(f"model must be one of {', '.join(CAM_ARCHS)}, got {arch!r}")
    return list(_meta_layers(arch))


def _check_layer(model: str, layer: str, valid: list[str]) -> None:
    if layer not in valid:
        raise refuse(f"unknown layer {layer!r} for {model}; valid layers: {', '.join(valid)}")


def _check_scorecam(
    cfg: AppConfig, arch: str, layer: str, top_k: int, method: str = "scorecam", aug_smooth: bool = False
) -> None:
    """Refuses a perturbation method's request over the server's budget (one forward pass per
    channel and class; SS-CAM and IS-CAM: per sample too; augmentation: 6 times), advising only
    what would fit."""
    channels = _meta_layers(arch)
    per_channel = REGISTRY[method].samples * (6 if aug_smooth else 1)
    channels = {name: c * per_channel for name, c in channels.items()}
    need, budget = channels[layer] * top_k, cfg.scorecam_budget
    if need <= budget:
        return
    fixes = []
    fits = budget // channels[layer]  # top-k that would fit at this layer
    if fits >= 1:
        fixes.append(f"top-k {fits}" if fits == 1 else f"top-k {fits} or less")
    smaller = [name for name, c in channels.items() if c * top_k <= budget]
    if smaller:
        fixes.append(f"an earlier layer with fewer channels (e.g. {', '.join(smaller[-3:])})")
    fixes.append("another method (each costs about one forward pass)")
    where = cfg.torch_device.type.upper()
    name = REGISTRY[method].title
    each = f"{per_channel} per channel and class" if per_channel > 1 else "one per channel and class"
    if aug_smooth:
        fixes.insert(0, "no augmentation smoothing (it costs 6 times)")
    raise refuse(
        f"{name} on {arch} {layer} ({channels[layer] // per_channel} channels) with top-k {top_k} scores "
        f"{need} masked images ({each}); this {where} server allows {budget} per request. "
        f"Use {'; or '.join(fixes)}."
    )


def _cam_request(
    models: Models,
    image: Any,
    model: str,
    layer: str,
    method: str,
    top_k: float,
    aug_smooth: bool = False,
    archs: tuple[str, ...] | None = None,
) -> tuple:
    """Checks a Grad-CAM request against the server's limits; returns (image, engine). ``archs``:
    the models this request may use (default: the server's classifiers)."""
    if image is None:
        raise refuse("Upload an image.")
    _check(top_k, "top-k", 1, 10)
    if method not in METHODS:
        raise refuse(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    archs = archs or models.config.cam_archs
    if model not in archs:  # before any model is built, even a skeleton
        raise refuse(f"model must be one of {', '.join(archs)} on this server, got {model!r}")
    if not layer:
        layer = default_layer(model)  # empty: the model's default
    _check_layer(model, layer, layer_choices(model))
    if method in PERTURBATION_METHODS and arch_kind(model) == "classifier":
        _check_scorecam(models.config, model, layer, int(top_k), method, bool(aug_smooth))
    return load_upload(image, "image"), models.cam(model, layer, method)


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
        img, cam = _cam_request(models, image, model, layer, method, top_k, aug_smooth, cfg.explain_archs)
        side, eigen = cfg.display_size, bool(eigen_smooth)
        if found:
            _check(score_threshold, "score threshold", 0, 1)
            _check(max_detections, "max detections", 1, 10)
            results = gpu(explain_found)(
                cam,
                img,
                classes=asked,
                score_threshold=float(score_threshold),
                max_detections=int(max_detections),
                top_k=int(top_k),
                max_side=side,
                eigen_smooth=eigen,
                aug_smooth=bool(aug_smooth),
            )
        else:
            results = gpu(cam.explain)(
                img,
                top_k=int(top_k),
                max_side=side,
                progress=progress,
                aug_smooth=bool(aug_smooth),
                eigen_smooth=eigen,
            )
    except Exception as e:
        raise _fail(e) from e
    random = bool(results[0].weights and results[0].weights.is_random)
    mark = " (random weights)" if random else ""
    out = models.outbox
    notice = results[0].weights.notice if results[0].weights else ""
    gallery = [
        (out.save(tag_weights(r.overlay, notice, random), f"overlay_{i + 1}.png"), found_caption(r, mark))
        for i, r in enumerate(results)
    ]
    heat = out.save(Image.fromarray((results[0].heatmap * 255).astype(np.uint8), "L"), "heatmap.png")
    table = [found_row(i + 1, r, mark) for i, r in enumerate(results)]
    return gallery, heat, table


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
        img, cam = _cam_request(models, image, model, layer, method, 1, aug_smooth)
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
        raise _fail(e) from e
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
        f"{_weights_note(random)}. A map with no information about the image scores the random "
        "column; figures near it mean the map explains little."
    )
    return rows, plot, verdict


# -- subject-aware ------------------------------------------------------------------------------
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
    from nstcam.subject import SubjectAwareResult, subject_aware_stylize

    cfg = models.config
    stop = stop or threading.Event()
    try:
        if content is None or style is None:
            raise refuse("Upload a content image and a style image.")
        _check_run(cfg, size, steps)
        _check(threshold, "threshold", 0, 1)
        _check(feather, "feather", 0, 64)
        img, style_img = load_upload(content, "content"), load_upload(style, "style")
        engine, cam = models.style(), models.cam(model, default_layer(model), "gradcam")
    except Exception as e:
        raise _fail(e) from e
    note = _weights_note(engine.weights.is_random)

    def run(put: Callable[[Any], None]) -> SubjectAwareResult | Cancelled:
        try:
            return subject_aware_stylize(
                img,
                style_img,
                engine=engine,
                cam=cam,
                mode=mode,
                threshold=float(threshold),
                feather=float(feather),
                top_k=3,
                on_mask=lambda mask, saliency: put(("mask", mask, saliency)),
                size=int(size),
                steps=int(steps),
                seed=0,
                progress=_progress_reporter(put, stop),
                preview_every=max(1, int(preview_every)),
            )
        except Cancelled as c:
            return c

    mask_img = None
    yield None, None, [], [], "", "starting: finding the subject with Grad-CAM…" + note
    try:
        for item in (result := _Result(_in_thread(run, stop))):
            if item[0] == "mask":
                mask_img = Image.fromarray((item[1] * 255).astype(np.uint8), "L")
                status = f"subject: {item[2].label}{note}; stylising…"
                yield mask_img, None, [], [], "", status
            else:
                yield mask_img, item[0], [], [], "", item[1] + note
    except Exception as e:
        raise _fail(e) from e
    if isinstance(result.value, Cancelled):
        c = result.value
        yield mask_img, c.image, [], [], "", f"cancelled at step {len(c.history)}/{int(steps)}" + note
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
    steps_done = _count(len(meta["history"]), "step")
    status = f"done: {out.width}x{out.height}, {steps_done} in {meta['seconds']:.1f} s{note}"
    yield mask_img, out, before, after, md, status


# -- feature maps -------------------------------------------------------------------------------


def feature_layer_choices(model: str) -> list[str]:
    """Layers the feature-map viewer offers for ``model``."""
    from nstcam.style import VGG_LAYERS

    if model == "vgg16_bn":
        return list(VGG_LAYERS)
    return layer_choices(model)


def features_handler(
    models: Models, image: Any, model: str = "vgg16_bn", layer: str = "", top: int = 16
) -> tuple[Image.Image, list[list[Any]], str]:
    """Returns (grid of the most active channels, table rows [rank, channel, mean], a note); an
    empty ``layer`` is the model's own default (``relu3_1`` for VGG16_bn)."""
    from nstcam.features import feature_maps

    try:
        if image is None:
            raise refuse("Upload an image.")
        offered = ("vgg16_bn", *models.config.cam_archs)
        if model not in offered:
            raise refuse(f"model must be one of {', '.join(offered)} on this server, got {model!r}")
        layer = layer or ("relu3_1" if model == "vgg16_bn" else default_layer(model))
        _check_layer(model, layer, feature_layer_choices(model))
        _check(top, "channels", 1, 64)
        img = load_upload(image, "image")
        engine = models.style() if model == "vgg16_bn" else models.cam(model, default_layer(model), "gradcam")
        fm = gpu(feature_maps)(engine, img, layer, top=int(top))
    except Exception as e:
        raise _fail(e) from e
    random = bool(engine.weights and engine.weights.is_random)
    c, h, w = fm.activations.shape
    note = f"{model} {layer}: {c} channels of {w}x{h}; the {len(fm.channels)} most active" + _weights_note(
        random
    )
    rows = [[i + 1, ch, round(m, 4)] for i, (ch, m) in enumerate(zip(fm.channels, fm.means, strict=True))]
    return tag_weights(fm.grid, engine.weights.notice if engine.weights else "", random), rows, note
