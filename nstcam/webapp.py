"""The Gradio app: a thin layer over the Python API (``app.py`` only parses flags and launches).

Handlers are plain functions (testable without a server); every failure reaches the user as a
``gr.Error`` with a clear message, and the server keeps serving.
"""

from __future__ import annotations

import logging
import os
import queue
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import torch
from PIL import Image

from nstcam._device import pick_device
from nstcam.cam import CAM_ARCHS, GradCAM, candidate_layers
from nstcam.image import ImageError, load_image, save_image
from nstcam.style import Cancelled, InsufficientMemoryError, StyleTransfer
from nstcam.weights import WeightsUnavailableError, build_model

__all__ = [
    "AppConfig",
    "Models",
    "build_demo",
    "cam_handler",
    "layer_choices",
    "stylize_handler",
    "subject_handler",
]

logger = logging.getLogger(__name__)

SAMPLES = Path(__file__).resolve().parent / "assets" / "samples"
METHODS = ["gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "scorecam"]
RANDOM_BANNER = (
    "⚠️ **Random weights** — this server runs with seeded random weights (offline/test mode). "
    "Stylised images and Grad-CAM maps are **not meaningful**."
)

try:  # Hugging Face ZeroGPU: borrow a GPU per call; a no-op everywhere else
    import spaces  # type: ignore[import-not-found]

    gpu = spaces.GPU(duration=120)
except ImportError:  # pragma: no cover - depends on the environment

    def gpu(fn):
        return fn


@dataclass
class AppConfig:
    """Server settings.

    Attributes:
        random_weights: use seeded random weights (offline demos and tests).
        device: where models run; default the best available.
        max_size: largest output side a request may ask for (px).
        max_steps: most optimisation steps a request may ask for.
    """

    random_weights: bool = False
    device: str | None = None
    max_size: int | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        self.torch_device = pick_device(self.device)
        on_gpu = self.torch_device.type != "cpu"
        self.max_size = int(self.max_size or os.environ.get("NSTCAM_MAX_SIZE") or (2048 if on_gpu else 512))
        self.max_steps = int(
            self.max_steps or os.environ.get("NSTCAM_MAX_STEPS") or (1000 if on_gpu else 300)
        )

    @property
    def weights(self) -> str:
        return "random" if self.random_weights else "imagenet"


class Models:
    """Loads each model once per process (thread-safe) and hands out engines built on them."""

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._style: StyleTransfer | None = None
        self._nets: dict[str, torch.nn.Module] = {}
        self.errors: dict[str, str] = {}

    def style(self) -> StyleTransfer:
        with self._lock:
            if self._style is None:
                self._style = StyleTransfer(self.config.weights, device=self.config.torch_device)
            return self._style

    def cam(self, arch: str, layer: str, method: str) -> GradCAM:
        if arch not in CAM_ARCHS:
            raise ValueError(f"model must be one of {', '.join(CAM_ARCHS)}, got {arch!r}")
        with self._lock:
            if arch not in self._nets:
                self._nets[arch] = build_model(arch, self.config.weights).to(self.config.torch_device)
            net = self._nets[arch]
        return GradCAM(model=net, target_layer=layer, method=method, device=self.config.torch_device)

    def preload(self, archs: tuple[str, ...] = ("resnet50",)) -> None:
        """Loads (downloading where needed) the default models at start-up, never per request."""
        for name, load in [
            ("vgg16_bn", self.style),
            *[(a, lambda a=a: self.cam(a, "layer4", "gradcam")) for a in archs],
        ]:
            try:
                load()
            except WeightsUnavailableError as e:
                self.errors[name] = str(e)
                logger.error("could not load %s: %s", name, e)


def SafeImage(**kwargs: Any) -> gr.Image:  # noqa: N802 - reads like the component it builds
    """A ``gr.Image`` whose upload-decoding failures become a clear ``gr.Error`` naming the problem.

    Gradio decodes uploads before a handler runs; its own error would be a long internal message.
    (The instance's ``preprocess`` is wrapped rather than subclassed, so Gradio sees a plain Image.)
    """
    comp = gr.Image(**kwargs)
    original = comp.preprocess

    def preprocess(payload: Any) -> Any:
        try:
            return original(payload)
        except Exception as e:
            path = getattr(payload, "path", None)
            name = getattr(payload, "orig_name", None) or (Path(path).name if path else "upload")
            try:
                load_image(path)
            except Exception as why:  # noqa: BLE001 - any reason becomes the message
                raise gr.Error(f"Bad image: {name}: {why}") from e
            raise gr.Error(f"Bad image: {name} could not be read ({type(e).__name__})") from e

    comp.preprocess = preprocess
    return comp


def _fail(e: BaseException) -> gr.Error:
    if isinstance(e, gr.Error):
        return e
    if isinstance(e, (ImageError, FileNotFoundError)):
        return gr.Error(f"Bad image: {e}")
    if isinstance(e, WeightsUnavailableError):
        return gr.Error(f"Model weights are missing: {e}")
    if isinstance(e, (InsufficientMemoryError, torch.cuda.OutOfMemoryError, MemoryError)):
        return gr.Error(f"Out of memory: {e}. Try a smaller size.")
    if isinstance(e, ValueError):
        return gr.Error(str(e))
    logger.exception("unexpected error in a request")
    return gr.Error(f"Internal error ({type(e).__name__}): {e}")


def _check(value: float | None, name: str, lo: float, hi: float) -> None:
    if value is None or not lo <= value <= hi:
        raise gr.Error(f"{name} must be between {lo:g} and {hi:g} on this server, got {value}")


def _check_run(cfg: AppConfig, size: float | None, steps: float | None) -> None:
    """The server's limits on a style-transfer request."""
    _check(size, "size", 64, cfg.max_size)
    _check(steps, "steps", 1, cfg.max_steps)


def _weights_note(random: bool) -> str:
    return " — RANDOM weights: not meaningful" if random else ""


# -- style transfer -----------------------------------------------------------------------------
def stylize_handler(
    models: Models,
    content: Any,
    style_a: Any,
    style_b: Any = None,
    blend: float = 0.0,
    size: int = 384,
    steps: int = 100,
    style_strength: float = 50.0,
    content_strength: float = 1.0,
    smoothness: float = 5.0,
    preserve_color: bool = False,
    seed: int = 0,
    optimizer: str = "lbfgs",
    preview_every: int = 10,
) -> Iterator[tuple[Image.Image | None, str, str | None]]:
    """Streams (image, status, PNG path) while stylising; the last item is the result.

    ``blend`` is the weight of ``style_b`` (0 = only ``style_a``). Closing the generator (the
    Cancel button) stops the optimisation at its next step.
    """
    cfg = models.config
    try:
        if content is None or style_a is None:
            raise gr.Error("Upload a content image and at least one style image.")
        _check_run(cfg, size, steps)
        _check(blend, "blend", 0, 1)
        content_img = load_image(content)
        styles = [load_image(style_a)]
        weights = [1.0]
        if style_b is not None and blend > 0:
            styles.append(load_image(style_b))
            weights = [1.0 - blend, blend]
        st = models.style()
    except Exception as e:
        raise _fail(e) from e

    random = st.weights.is_random
    updates: queue.Queue = queue.Queue()
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def on_step(info) -> bool:
        if info.preview is not None:
            updates.put(
                (info.preview, f"step {info.step}/{info.total_steps} · loss {info.losses['total']:.4g}")
            )
        return not stop.is_set()

    @gpu
    def work() -> None:
        try:
            outcome["image"] = st.stylize(
                content_img,
                styles,
                style_weights=weights,
                size=int(size),
                steps=int(steps),
                style_weight=float(style_strength),
                content_weight=float(content_strength),
                tv_weight=float(smoothness),
                preserve_color=bool(preserve_color),
                seed=int(seed),
                optimizer=optimizer,
                progress=on_step,
                preview_every=max(1, int(preview_every)),
            )
        except BaseException as e:  # noqa: BLE001 - handed to the request thread
            outcome["error"] = e
        finally:
            updates.put(None)

    worker = threading.Thread(target=work, name="nstcam-stylize", daemon=True)
    worker.start()
    try:
        while (item := updates.get()) is not None:
            yield item[0], item[1] + _weights_note(random), None
    finally:
        stop.set()  # generator closed (cancel, disconnect) or finished: stop the worker
        worker.join()
    err = outcome.get("error")
    if isinstance(err, Cancelled):
        yield (err.image, "cancelled", None)
        return
    if err is not None:
        raise _fail(err) from err
    img = outcome["image"]
    meta = img.info["nstcam"]
    path = Path(tempfile.mkdtemp(prefix="nstcam-")) / "stylized.png"
    save_image(img, path)
    status = (
        f"done: {img.width}x{img.height}, {len(meta['history'])} steps in {meta['seconds']:.1f} s, "
        f"seed {meta['params']['seed']}" + _weights_note(random)
    )
    yield img, status, str(path)


# -- Grad-CAM -----------------------------------------------------------------------------------
def layer_choices(arch: str) -> list[str]:
    """Valid target layers of a ResNet, computed on the meta device (no weights, no memory)."""
    import torchvision

    if arch not in CAM_ARCHS:
        raise gr.Error(f"model must be one of {', '.join(CAM_ARCHS)}")
    with torch.device("meta"):
        net = getattr(torchvision.models, arch)()
    return candidate_layers(net)


def cam_handler(
    models: Models,
    image: Any,
    arch: str = "resnet50",
    layer: str = "layer4",
    method: str = "gradcam",
    top_k: int = 3,
) -> tuple[list[tuple[Image.Image, str]], Image.Image, list[list[Any]]]:
    """Returns (overlays with captions, top-1 heatmap, table rows [rank, class, label, probability])."""
    try:
        if image is None:
            raise gr.Error("Upload an image.")
        _check(top_k, "top-k", 1, 10)
        if method not in METHODS:
            raise gr.Error(f"method must be one of {', '.join(METHODS)}")
        img = load_image(image)
        cam = models.cam(arch, layer, method)
        results = gpu(cam.explain)(img, top_k=int(top_k))
    except Exception as e:
        raise _fail(e) from e
    note = _weights_note(bool(results[0].weights and results[0].weights.is_random))
    gallery = [(r.overlay, f"{r.label} — p={r.score:.3f}{note}") for r in results]
    heat = Image.fromarray((results[0].heatmap * 255).astype(np.uint8), "L")
    table = [[i + 1, r.class_index, r.label + note, round(r.score, 4)] for i, r in enumerate(results)]
    return gallery, heat, table


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
    arch: str = "resnet50",
) -> tuple[Image.Image, Image.Image, list[tuple[Image.Image, str]], list[tuple[Image.Image, str]], str]:
    """Returns (mask, result, before overlays, after overlays, report markdown)."""
    from nstcam.subject import subject_aware_stylize

    cfg = models.config
    try:
        if content is None or style is None:
            raise gr.Error("Upload a content image and a style image.")
        _check_run(cfg, size, steps)
        _check(threshold, "threshold", 0, 1)
        _check(feather, "feather", 0, 64)
        res = gpu(subject_aware_stylize)(
            load_image(content),
            load_image(style),
            engine=models.style(),
            cam=models.cam(arch, "layer4", "gradcam"),
            mode=mode,
            threshold=float(threshold),
            feather=float(feather),
            size=int(size),
            steps=int(steps),
            top_k=3,
            seed=0,
        )
    except Exception as e:
        raise _fail(e) from e
    rep = res.report
    mask = Image.fromarray((res.mask * 255).astype(np.uint8), "L")
    before = [(r.overlay, f"before: {r.label} — p={r.score:.3f}") for r in rep.before]
    after = [(r.overlay, f"after: {r.label} — p={r.score:.3f}") for r in rep.after]
    d = rep.to_dict()
    md = (
        f"**{rep.summary()}**\n\n| | before | after |\n| --- | --- | --- |\n"
        f"| top-1 | {rep.before[0].label} ({rep.before[0].score:.3f}) "
        f"| {rep.after[0].label} ({rep.after[0].score:.3f}) |\n"
        f"| p({d['class']}) | {d['score_before']:.3f} | {d['score_after']:.3f} |\n"
        f"| map IoU (threshold {d['threshold']}) | | {d['iou']:.3f} |"
    )
    return mask, res.image, before, after, md


# -- the Blocks app -----------------------------------------------------------------------------
def _sample(name: str) -> str:
    return str(SAMPLES / name)


def build_demo(config: AppConfig | None = None, models: Models | None = None) -> gr.Blocks:
    """Builds the Gradio Blocks app (tabs "Style transfer" and "Grad-CAM")."""
    config = config or AppConfig()
    models = models or Models(config)
    on_cpu = config.torch_device.type == "cpu"
    with gr.Blocks(title="nstcam — style transfer and Grad-CAM") as demo:
        gr.Markdown(
            "# nstcam\nNeural style transfer on VGG16_bn and Grad-CAM on ResNets, built on PyTorch hooks."
        )
        if config.random_weights:
            gr.Markdown(RANDOM_BANNER, elem_id="random-banner")
        for name, err in models.errors.items():
            gr.Markdown(f"⚠️ **{name} unavailable**: {err}")
        limits = (
            f"Running on **{config.torch_device.type.upper()}**: outputs up to {config.max_size} px and "
            f"{config.max_steps} steps" + (" (CPU limits; a GPU Space allows more)." if on_cpu else ".")
        )
        gr.Markdown(limits, elem_id="limits")

        with gr.Tab("Style transfer"):
            with gr.Row():
                with gr.Column():
                    content = SafeImage(
                        label="Content", type="filepath", sources=["upload", "clipboard", "webcam"]
                    )
                    with gr.Row():
                        style_a = SafeImage(label="Style A", type="filepath", sources=["upload", "clipboard"])
                        style_b = SafeImage(
                            label="Style B (optional)", type="filepath", sources=["upload", "clipboard"]
                        )
                    blend = gr.Slider(0, 1, value=0.0, step=0.05, label="Blend: weight of style B")
                    size = gr.Slider(
                        64,
                        config.max_size,
                        value=min(384, config.max_size),
                        step=16,
                        label="Size (long side, px)",
                    )
                    steps = gr.Slider(
                        1, config.max_steps, value=min(100, config.max_steps), step=1, label="Steps"
                    )
                    with gr.Accordion("Advanced", open=False):
                        style_strength = gr.Number(50.0, label="Style strength", minimum=0)
                        content_strength = gr.Number(1.0, label="Content strength", minimum=0)
                        smoothness = gr.Number(5.0, label="Smoothness (total variation)", minimum=0)
                        preserve = gr.Checkbox(False, label="Preserve content colours")
                        seed = gr.Number(0, label="Seed", precision=0)
                        optimizer = gr.Radio(["lbfgs", "adam"], value="lbfgs", label="Optimiser")
                    with gr.Row():
                        run = gr.Button("Stylise", variant="primary")
                        cancel = gr.Button("Cancel", variant="stop")
                with gr.Column():
                    result = gr.Image(label="Result", type="pil", format="png")
                    status = gr.Textbox(label="Progress", interactive=False)
                    download = gr.File(label="Download PNG")
            gr.Examples(
                [
                    [_sample("chelsea.png"), _sample("hubble_deep_field.jpg")],
                    [_sample("astronaut.png"), _sample("brick.png")],
                ],
                inputs=[content, style_a],
            )

            def _stylize(c, a, b, bl, sz, stp, ss, cs, sm, pc, sd, opt):
                yield from stylize_handler(models, c, a, b, bl, sz, stp, ss, cs, sm, pc, sd, opt)

            ev = run.click(
                _stylize,
                [
                    content,
                    style_a,
                    style_b,
                    blend,
                    size,
                    steps,
                    style_strength,
                    content_strength,
                    smoothness,
                    preserve,
                    seed,
                    optimizer,
                ],
                [result, status, download],
                api_name="stylize",
            )
            cancel.click(None, None, None, cancels=[ev], api_name=False)

        with gr.Tab("Grad-CAM"):
            with gr.Row():
                with gr.Column():
                    cam_image = SafeImage(
                        label="Image",
                        type="filepath",
                        sources=["upload", "clipboard", "webcam"],
                        elem_id="cam-input",
                    )
                    arch = gr.Dropdown(list(CAM_ARCHS), value="resnet50", label="Model")
                    layer = gr.Dropdown(layer_choices("resnet50"), value="layer4", label="Layer")
                    method = gr.Dropdown(METHODS, value="gradcam", label="Method")
                    top_k = gr.Slider(1, 10, value=3, step=1, label="Top-k classes")
                    explain = gr.Button("Explain", variant="primary", elem_id="cam-run")
                with gr.Column():
                    overlays = gr.Gallery(
                        label="Overlays (class — probability)", columns=3, elem_id="cam-overlays"
                    )
                    heatmap = gr.Image(label="Heatmap (top-1)", type="pil")
                    table = gr.Dataframe(headers=["rank", "class", "label", "probability"], label="Top-k")
            gr.Examples(
                [[_sample("chelsea.png")], [_sample("coffee.png")], [_sample("rocket.jpg")]],
                inputs=[cam_image],
            )

            arch.change(
                lambda a: gr.Dropdown(choices=layer_choices(a), value="layer4"), arch, layer, api_name=False
            )

            def _cam(i, a, lay, m, k):
                return cam_handler(models, i, a, lay, m, k)

            explain.click(
                _cam, [cam_image, arch, layer, method, top_k], [overlays, heatmap, table], api_name="gradcam"
            )

        with gr.Tab("Subject-aware"):
            gr.Markdown(
                "Grad-CAM finds the subject; the style goes to the background (or only to the subject). "
                "The report says whether the classifier still recognises the subject."
            )
            with gr.Row():
                with gr.Column():
                    sa_content = SafeImage(
                        label="Content", type="filepath", sources=["upload", "clipboard", "webcam"]
                    )
                    sa_style = SafeImage(label="Style", type="filepath", sources=["upload", "clipboard"])
                    sa_mode = gr.Radio(["background", "subject"], value="background", label="Stylise the")
                    sa_threshold = gr.Slider(0, 1, value=0.4, step=0.05, label="Saliency threshold")
                    sa_feather = gr.Slider(0, 32, value=8, step=1, label="Feather (px)")
                    sa_size = gr.Slider(
                        64, config.max_size, value=min(384, config.max_size), step=16, label="Size"
                    )
                    sa_steps = gr.Slider(
                        1, config.max_steps, value=min(100, config.max_steps), step=1, label="Steps"
                    )
                    sa_arch = gr.Dropdown(list(CAM_ARCHS), value="resnet50", label="Classifier")
                    sa_run = gr.Button("Stylise around the subject", variant="primary")
                with gr.Column():
                    with gr.Row():
                        sa_mask = gr.Image(label="Style mask (white = styled)", type="pil")
                        sa_result = gr.Image(label="Result", type="pil", format="png")
                    sa_report = gr.Markdown()
                    sa_before = gr.Gallery(label="Before", columns=3)
                    sa_after = gr.Gallery(label="After", columns=3)
            gr.Examples(
                [[_sample("chelsea.png"), _sample("hubble_deep_field.jpg")]], inputs=[sa_content, sa_style]
            )

            def _subject(c, s, m, t, f, sz, stp, a):
                return subject_handler(models, c, s, m, t, f, sz, stp, a)

            sa_run.click(
                _subject,
                [sa_content, sa_style, sa_mode, sa_threshold, sa_feather, sa_size, sa_steps, sa_arch],
                [sa_mask, sa_result, sa_before, sa_after, sa_report],
                api_name="subject_aware",
            )

    demo.queue(default_concurrency_limit=1 if on_cpu else 2, max_size=32)
    return demo
