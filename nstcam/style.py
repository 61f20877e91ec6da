"""Gatys-style neural style transfer on torchvision VGG16_bn, with features read by forward hooks.

Example:
    >>> st = StyleTransfer(weights="imagenet")
    >>> img = st.stylize("cat.jpg", "starry.jpg", size=512, steps=300)
    >>> img.save("cat_starry.png")
"""

from __future__ import annotations

import copy
import glob
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from tqdm.auto import tqdm

from nstcam._color import luminance_only, match_luminance, merge_luminance
from nstcam._device import available_memory, pick_device
from nstcam._losses import content_loss, gram, style_loss, total_variation
from nstcam._version import __version__
from nstcam._vgg import VGGFeatureHooks, fold_batchnorm, layer_index
from nstcam.image import (
    ImageError,
    ImageSource,
    image_to_tensor,
    load_image,
    long_side_size,
    normalize,
    resize_long_side,
    save_image,
    tensor_to_image,
)
from nstcam.mask import MaskSource, load_mask, resize_mask
from nstcam.weights import WeightsInfo, build_model, weights_info

__all__ = [
    "DEFAULT_CONTENT_LAYERS",
    "DEFAULT_STYLE_LAYERS",
    "BatchResult",
    "Cancelled",
    "InsufficientMemoryError",
    "StepInfo",
    "StyleTransfer",
]

logger = logging.getLogger(__name__)

DEFAULT_STYLE_LAYERS = ("relu1_1", "relu2_1", "relu3_1", "relu4_1", "relu5_1")
DEFAULT_CONTENT_LAYERS = ("relu4_2",)
_KEEP = 10.0  # with a style mask: content loss weight where the mask is 0, relative to where it is 1
_PIXEL_KEEP = 100.0  # with a style mask: weight of the pixel-space content anchor where the mask is 0
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
OPTIMIZERS = ("lbfgs", "adam")
INITS = ("content", "noise", "style")


class Cancelled(RuntimeError):  # noqa: N818 - reads naturally: `except Cancelled`
    """The progress callback asked to stop.

    Attributes:
        image: the result so far (a PIL image), or None if no step had run.
        history: the loss history so far.
    """

    def __init__(self, image: Image.Image | None, history: list[dict[str, float]]) -> None:
        super().__init__(f"style transfer cancelled after {len(history)} steps")
        self.image = image
        self.history = history


class _BudgetSpent(Exception):  # noqa: N818 - control flow inside _optimize
    """The step budget ran out inside an L-BFGS line search."""


class InsufficientMemoryError(MemoryError):
    """A run would not fit in the device's free memory; the message gives a size that fits."""


@dataclass
class StepInfo:
    """What the progress callback receives after every evaluation of the network.

    Attributes:
        step: evaluations done so far, over all scales (1-based).
        total_steps: evaluations the whole run will do.
        scale: index of the current scale (0 = coarsest).
        size: (width, height) being optimised.
        losses: ``total``, ``content``, ``style`` and ``tv`` (weighted).
        preview: the current image every ``preview_every`` steps, else None.
        elapsed: seconds since the run started.
    """

    step: int
    total_steps: int
    scale: int
    size: tuple[int, int]
    losses: dict[str, float]
    preview: Image.Image | None
    elapsed: float


class BatchResult(list):
    """Output paths of :meth:`StyleTransfer.stylize_batch` (written and already present).

    Attributes:
        written: outputs written by this call.
        skipped: outputs that existed already and were kept.
        failed: input -> error message, for inputs that could not be stylised.
    """

    def __init__(self) -> None:
        super().__init__()
        self.written: list[Path] = []
        self.skipped: list[Path] = []
        self.failed: dict[str, str] = {}


@dataclass
class _Targets:
    content: dict[str, torch.Tensor]
    style: dict[str, torch.Tensor]
    mask: torch.Tensor | None = None  # (1, 1, h, w) style mask at this scale, in-optimisation mode only
    pixels: torch.Tensor | None = None  # the content image at this scale (for the masked pixel anchor)
    layer_masks: dict = field(default_factory=dict)  # feature shape -> mask resized to it

    def mask_for(self, f: torch.Tensor) -> torch.Tensor:
        key = tuple(f.shape[-2:])
        if key not in self.layer_masks:
            self.layer_masks[key] = resize_mask(self.mask, key, device=f.device)
        return self.layer_masks[key]


@dataclass
class _Plan:
    """Everything a run needs, resolved and validated once."""

    size: int
    scales: list[int]
    steps: list[int]
    style_layers: dict[str, float]
    content_layers: list[str]
    style_weight: float
    content_weight: float
    tv_weight: float
    optimizer: str
    init: str
    blend: list[float]
    style_scale: float
    preserve_color: bool
    seed: int
    lr: float
    history_size: int
    preview_every: int
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return d


def _auto_scales(size: int) -> list[int]:
    scales = [size]
    if size > 512:
        while scales[0] // 2 >= 256:
            scales.insert(0, scales[0] // 2)
    return scales


class StyleTransfer:
    """Neural style transfer (Gatys et al.) on VGG16_bn.

    The engine runs a copy of ``model.features`` with BatchNorm folded into the convolutions (same
    features, fewer ops), in eval mode, with every parameter frozen; a forward hook manager reads the
    ReLU outputs and stops the forward pass at the deepest layer needed.

    Args:
        weights: ``"imagenet"``, ``"random"`` or a path to a state dict (see
            :func:`nstcam.build_model`). Ignored when ``model`` is given.
        model: a ready torchvision ``vgg16_bn`` instance.
        device: where to run; default CUDA, else MPS, else CPU.
        fold_bn: fold BatchNorm into the convolutions.
        amp: bfloat16 autocast for the forward pass on CUDA (Gram matrices and losses stay float32).
            Off by default: L-BFGS's line search needs consistent loss values, and bf16's effect
            on quality has not been measured yet.
        channels_last: channels-last memory format; default on for CUDA.
        seed: seed of random weights.

    Attributes:
        model: the VGG16_bn given or built.
        net: the (folded, frozen) copy of ``model.features`` that runs.
        weights: where the weights came from; ``weights.is_random`` means results are not meaningful.
        style_target_computations: how many style images' Gram targets were computed (diagnostics).
    """

    def __init__(
        self,
        weights: str | Path = "imagenet",
        model: nn.Module | None = None,
        device: torch.device | str | None = None,
        *,
        fold_bn: bool = True,
        amp: bool = False,
        channels_last: bool | None = None,
        seed: int = 0,
    ) -> None:
        self.device = pick_device(device)
        if model is None:
            model = build_model("vgg16_bn", weights, seed=seed)
        features = getattr(model, "features", None)
        if not isinstance(features, nn.Sequential) or len(features) != 44:
            raise TypeError(
                "model must be a torchvision vgg16_bn (model.features with 44 modules); "
                "build one with torchvision.models.vgg16_bn() or nstcam.build_model('vgg16_bn')"
            )
        self.model = model
        self.weights: WeightsInfo = weights_info(model) or WeightsInfo("vgg16_bn", "custom", "user model")
        was_training = features.training
        features.eval()
        net = fold_batchnorm(features) if fold_bn else copy.deepcopy(features)
        features.train(was_training)
        net.eval().requires_grad_(False)
        self.channels_last = self.device.type == "cuda" if channels_last is None else channels_last
        self.amp = bool(amp) and self.device.type == "cuda"
        net.to(self.device)
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
        self.net = net
        self.style_target_computations = 0
        if self.weights.is_random:
            logger.warning("%s", self.weights.notice)

    # -- public API ---------------------------------------------------------------------------
    def stylize(
        self,
        content: ImageSource,
        style: ImageSource | Sequence[ImageSource],
        *,
        size: int = 512,
        steps: int | Sequence[int] = 300,
        style_weight: float = 50.0,
        content_weight: float = 1.0,
        tv_weight: float = 5.0,
        optimizer: str = "lbfgs",
        init: str = "content",
        style_weights: Sequence[float] | None = None,
        style_layers: Sequence[str] | Mapping[str, float] | None = None,
        content_layers: Sequence[str] | None = None,
        style_scale: float = 1.0,
        preserve_color: bool = False,
        style_mask: MaskSource | None = None,
        mask_mode: str = "optimize",
        scales: Sequence[int] | None = None,
        seed: int | None = None,
        lr: float | None = None,
        history_size: int = 50,
        progress: Callable[[StepInfo], bool | None] | None = None,
        preview_every: int = 0,
        progress_bar: bool = False,
        on_memory: str = "error",
    ) -> Image.Image:
        """Stylises ``content`` with ``style``.

        Args:
            content: the content image (anything :func:`nstcam.load_image` takes).
            style: one style image, or a list of them to blend.
            size: long side of the output, in pixels.
            steps: evaluations of the network (forward + backward) per scale, whatever the
                optimiser; or one count per scale.
            style_weight: weight of the style loss.
            content_weight: weight of the content loss.
            tv_weight: weight of the total-variation (smoothness) loss.
            optimizer: ``"lbfgs"`` or ``"adam"``.
            init: start from the ``"content"``, from ``"noise"``, or from the ``"style"``.
            style_weights: blend weights of several style images (normalised to sum to 1).
            style_layers: style layers, or a mapping layer -> weight (default: relu1_1 ... relu5_1,
                equal weights).
            content_layers: content layers (default: relu4_2).
            style_scale: size of the style image relative to the output (1 = same long side).
            preserve_color: transfer luminance only and keep the content's colours.
            style_mask: H x W values in [0, 1] (any size; array, tensor, image or path): 1 where the
                style goes, 0 where the content is kept.
            mask_mode: ``"optimize"`` weights the losses by the mask inside the optimisation (style
                Gram matrices over the masked region, content loss 10x stronger where the mask is 0,
                the mask resized to each layer, plus a pixel-space content anchor where the mask is
                0, since deep layers see across the mask edge); ``"blend"`` stylises everything, then blends
                ``mask * stylised + (1 - mask) * content``.
            scales: long sides to optimise at, coarse to fine; each starts from the previous result
                upscaled. Default: ``size`` alone up to 512 px, else halving down to 256 px.
            seed: seed of the noise initialisation (recorded in the result either way).
            lr: learning rate (default 1 for L-BFGS, 0.02 for Adam).
            history_size: L-BFGS history size.
            progress: called after every step with a :class:`StepInfo`; return False to cancel.
            preview_every: put a preview image in the :class:`StepInfo` every N steps (0: never).
            progress_bar: show a tqdm progress bar.
            on_memory: if the run would not fit in free memory, ``"error"`` raises
                :class:`InsufficientMemoryError`, ``"reduce"`` lowers ``size`` until it fits.

        Returns:
            The stylised RGB image. ``image.info["nstcam"]`` holds the parameters used (``params``),
            the loss history (``history``, one dict per step) and the weights notice.

        Raises:
            Cancelled: the progress callback returned False; holds the partial result.
            ImageError: an input is not a usable image.
            InsufficientMemoryError: the run does not fit in memory and ``on_memory="error"``.
            ValueError: a parameter is out of range.
        """
        params = dict(locals())
        for k in ("self", "content", "style", "progress", "progress_bar", "style_mask"):
            params.pop(k)
        content_img = load_image(content)
        style_imgs = [load_image(s) for s in (style if isinstance(style, (list, tuple)) else [style])]
        mask = load_mask(style_mask) if style_mask is not None else None
        plan = self._plan(n_styles=len(style_imgs), **params)
        return self._run(content_img, style_imgs, plan, progress, progress_bar, cache={}, mask=mask)

    def stylize_batch(
        self,
        contents: str | Path | Sequence[ImageSource],
        style: ImageSource | Sequence[ImageSource],
        out_dir: str | Path,
        *,
        overwrite: bool = False,
        ext: str = ".png",
        progress_bar: bool = True,
        **params: Any,
    ) -> BatchResult:
        """Stylises many content images with the same style; style targets are computed once.

        Args:
            contents: a list of images, a directory (its image files), or a glob pattern.
            style: one style image or a list to blend (see :meth:`stylize`).
            out_dir: where outputs go, as ``<stem>_stylized<ext>`` with a ``.json`` sidecar of the
                parameters used.
            overwrite: redo inputs whose output already exists.
            ext: ``".png"`` or ``".jpg"``.
            progress_bar: show a tqdm bar over the images.
            **params: any keyword of :meth:`stylize` except ``progress_bar``. ``style_mask`` may also be
                a callable that takes each content image (PIL) and returns its mask.

        Returns:
            The output paths (a :class:`BatchResult`; ``.failed`` maps each bad input to its error).
            A bad input is logged and skipped; the rest complete.
        """
        if ext.lower() not in (".png", ".jpg", ".jpeg"):
            raise ValueError(f"ext must be '.png', '.jpg' or '.jpeg', got {ext!r}")
        items = _expand_contents(contents)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        style_list = list(style) if isinstance(style, (list, tuple)) else [style]
        style_imgs = [load_image(s) for s in style_list]
        progress = params.pop("progress", None)
        params.pop("progress_bar", None)
        style_mask = params.pop("style_mask", None)
        fixed_mask = load_mask(style_mask) if style_mask is not None and not callable(style_mask) else None
        plan_kwargs = {**_stylize_defaults(), **params}
        plan = self._plan(n_styles=len(style_imgs), **plan_kwargs)
        cache: dict = {}
        result = BatchResult()
        names = _output_names(items, ext)
        for item, name in tqdm(
            list(zip(items, names, strict=True)), desc="stylize", unit="img", disable=not progress_bar
        ):
            out = out_dir / name
            label = str(item) if isinstance(item, (str, Path)) else name
            if out.exists() and not overwrite:
                logger.info("skipping %s: %s exists (overwrite=True to redo)", label, out)
                result.append(out)
                result.skipped.append(out)
                continue
            try:
                content_img = load_image(item)
                mask = fixed_mask
                if callable(style_mask):
                    mask = load_mask(style_mask(content_img))
                img = self._run(content_img, style_imgs, plan, progress, False, cache, mask=mask)
            except Cancelled:
                raise
            except (ImageError, FileNotFoundError, InsufficientMemoryError, OSError) as e:
                logger.error("skipping %s: %s", label, e)
                result.failed[label] = str(e)
                continue
            save_image(img, out)
            meta = dict(img.info["nstcam"], input=label, output=str(out))
            out.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))
            result.append(out)
            result.written.append(out)
        if result.failed:
            logger.warning("%d of %d inputs failed", len(result.failed), len(items))
        return result

    def estimate_memory(
        self,
        width: int,
        height: int,
        *,
        optimizer: str = "lbfgs",
        history_size: int = 50,
        deepest: str = "relu5_1",
    ) -> int:
        """Rough peak bytes of one optimisation step at ``width`` x ``height`` (activations kept for
        backward, their gradients, optimiser state, weights)."""
        last = layer_index(deepest)
        elems, h, w, c = 0, height, width, 3
        for m in list(self.net)[: last + 1]:
            if isinstance(m, nn.Conv2d):
                c = m.out_channels
                elems += c * h * w * 2  # conv output (+ its saved copy for backward)
            elif isinstance(m, nn.MaxPool2d):
                elems += c * h * w * 2  # input saved + int64 indices (counted as two floats)
                h, w = h // 2, w // 2
        act_bytes = 2 if self.amp else 4
        image = 3 * width * height * 4
        opt_state = (2 * history_size + 4) * image if optimizer == "lbfgs" else 4 * image
        weights = sum(p.numel() * p.element_size() for p in self.net.parameters())
        return int(elems * act_bytes * 1.5 + opt_state + weights)

    # -- planning -----------------------------------------------------------------------------
    def _plan(
        self,
        *,
        n_styles: int,
        size: int,
        steps: int | Sequence[int],
        style_weight: float,
        content_weight: float,
        tv_weight: float,
        optimizer: str,
        init: str,
        style_weights: Sequence[float] | None,
        style_layers: Sequence[str] | Mapping[str, float] | None,
        content_layers: Sequence[str] | None,
        style_scale: float,
        preserve_color: bool,
        mask_mode: str,
        scales: Sequence[int] | None,
        seed: int | None,
        lr: float | None,
        history_size: int,
        preview_every: int,
        on_memory: str,
    ) -> _Plan:
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {init!r}")
        if on_memory not in ("error", "reduce"):
            raise ValueError(f"on_memory must be 'error' or 'reduce', got {on_memory!r}")
        if not isinstance(size, int) or size < 16:
            raise ValueError(f"size must be an int of at least 16 pixels, got {size!r}")
        for name, v in (
            ("style_weight", style_weight),
            ("content_weight", content_weight),
            ("tv_weight", tv_weight),
        ):
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not style_scale > 0:
            raise ValueError(f"style_scale must be > 0, got {style_scale!r}")
        scales = list(scales) if scales else _auto_scales(size)
        if any(not isinstance(s, int) or s < 16 for s in scales) or scales != sorted(scales):
            raise ValueError(f"scales must be increasing ints of at least 16 px, got {scales}")
        size = scales[-1]
        steps_list = [steps] * len(scales) if isinstance(steps, int) else list(steps)
        if len(steps_list) != len(scales) or any(not isinstance(s, int) or s < 1 for s in steps_list):
            raise ValueError(f"steps must be an int >= 1 or one such int per scale {scales}, got {steps!r}")
        if style_weights is None:
            blend = [1.0 / n_styles] * n_styles
        else:
            blend = [float(w) for w in style_weights]
            if len(blend) != n_styles:
                raise ValueError(f"style_weights has {len(blend)} values for {n_styles} style images")
            if any(w < 0 for w in blend) or sum(blend) <= 0:
                raise ValueError(f"style_weights must be >= 0 with a positive sum, got {blend}")
            blend = [w / sum(blend) for w in blend]
        if style_layers is None:
            layers = dict.fromkeys(DEFAULT_STYLE_LAYERS, 1.0)
        elif isinstance(style_layers, Mapping):
            layers = {k: float(v) for k, v in style_layers.items()}
        else:
            layers = dict.fromkeys(style_layers, 1.0)
        content_layers = list(content_layers or DEFAULT_CONTENT_LAYERS)
        for name in [*layers, *content_layers]:
            layer_index(name)
        if not layers or sum(layers.values()) <= 0 or any(v < 0 for v in layers.values()):
            raise ValueError(f"style_layers needs at least one layer with a positive weight, got {layers}")
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        if preview_every < 0 or history_size < 1:
            raise ValueError("preview_every must be >= 0 and history_size >= 1")
        plan = _Plan(
            size=size,
            scales=scales,
            steps=steps_list,
            style_layers=layers,
            content_layers=content_layers,
            style_weight=float(style_weight),
            content_weight=float(content_weight),
            tv_weight=float(tv_weight),
            optimizer=optimizer,
            init=init,
            blend=blend,
            style_scale=float(style_scale),
            preserve_color=bool(preserve_color),
            seed=int(seed),
            lr=float(lr if lr is not None else (1.0 if optimizer == "lbfgs" else 0.02)),
            history_size=int(history_size),
            preview_every=int(preview_every),
        )
        plan.extra["on_memory"] = on_memory
        if mask_mode not in ("optimize", "blend"):
            raise ValueError(f"mask_mode must be 'optimize' or 'blend', got {mask_mode!r}")
        plan.extra["mask_mode"] = mask_mode
        return plan

    def _check_memory(self, plan: _Plan, content: Image.Image) -> None:
        free = available_memory(self.device)
        if free is None:
            return
        deepest = max([*plan.style_layers, *plan.content_layers], key=layer_index)

        def need(long_side: int) -> int:
            w, h = long_side_size(content.size, long_side)
            return self.estimate_memory(
                w, h, optimizer=plan.optimizer, history_size=plan.history_size, deepest=deepest
            )

        budget = int(free * 0.9)
        if need(plan.size) <= budget:
            return
        fits = plan.size
        while fits > 16 and need(fits) > budget:
            fits = int(fits * 0.9)
        msg = (
            f"{plan.size} px needs about {need(plan.size) / 2**30:.1f} GiB on {self.device.type}, "
            f"{free / 2**30:.1f} GiB is free; use size={fits} or less"
        )
        if plan.extra["on_memory"] == "error" or fits <= 16:
            raise InsufficientMemoryError(msg)
        logger.warning("%s: reducing to %d px", msg, fits)
        ratio = fits / plan.size
        plan.scales = [max(16, int(s * ratio)) for s in plan.scales]
        plan.size = plan.scales[-1]

    # -- targets ------------------------------------------------------------------------------
    def _features(self, hooks: VGGFeatureHooks, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = normalize(x)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            return hooks.features(x)

    def _style_targets(
        self,
        hooks: VGGFeatureHooks,
        styles: list[Image.Image],
        plan: _Plan,
        long_side: int,
        content_t: torch.Tensor,
        cache: dict,
    ) -> dict[str, torch.Tensor]:
        s_side = max(16, round(long_side * plan.style_scale))
        key = (s_side, tuple(plan.blend), tuple(plan.style_layers), plan.preserve_color)
        if plan.preserve_color:  # grey style matched to this content's luminance statistics
            key += (round(float(content_t.mean()), 4), round(float(content_t.std()), 4))
        if key in cache:
            return cache[key]
        targets: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for img, w in zip(styles, plan.blend, strict=True):
                if w == 0:
                    continue
                s = image_to_tensor(resize_long_side(img, s_side), self.device)
                if plan.preserve_color:
                    s = match_luminance(s, content_t)
                feats = self._features(hooks, s)
                self.style_target_computations += 1
                for name in plan.style_layers:
                    g = gram(feats[name]) * w
                    targets[name] = targets[name] + g if name in targets else g
        cache[key] = targets
        return targets

    # -- the run ------------------------------------------------------------------------------
    def _run(
        self,
        content: Image.Image,
        styles: list[Image.Image],
        plan: _Plan,
        progress: Callable[[StepInfo], bool | None] | None,
        progress_bar: bool,
        cache: dict,
        mask: np.ndarray | None = None,
    ) -> Image.Image:
        plan = copy.deepcopy(plan)
        plan.extra["style_mask"] = None if mask is None else f"{mask.shape[1]}x{mask.shape[0]}"
        self._check_memory(plan, content)
        layers = list(dict.fromkeys([*plan.style_layers, *plan.content_layers]))
        history: list[dict[str, float]] = []
        total_steps = sum(plan.steps)
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(plan.seed)
        x: torch.Tensor | None = None
        bar = tqdm(total=total_steps, desc="stylize", unit="step", disable=not progress_bar, leave=False)
        try:
            with VGGFeatureHooks(self.net, layers) as hooks:
                for si, (side, n_steps) in enumerate(zip(plan.scales, plan.steps, strict=True)):
                    c_full = image_to_tensor(resize_long_side(content, side), self.device)
                    c_in = luminance_only(c_full) if plan.preserve_color else c_full
                    with torch.no_grad():
                        cf = self._features(hooks, c_in)
                        in_loss = mask is not None and plan.extra["mask_mode"] == "optimize"
                        targets = _Targets(
                            content={n: cf[n].detach().float() for n in plan.content_layers},
                            style=self._style_targets(hooks, styles, plan, side, c_in, cache),
                            mask=resize_mask(mask, tuple(c_in.shape[-2:]), self.device) if in_loss else None,
                            pixels=c_in if in_loss else None,
                        )
                        del cf
                    x = self._init_image(x, c_in, styles, plan, gen)
                    if si > 0 and targets.mask is not None:  # upscaling blurred the kept region: restore it
                        with torch.no_grad():
                            x.copy_(targets.mask * x + (1 - targets.mask) * c_in)
                    x = self._optimize(
                        hooks, x, targets, plan, si, n_steps, history, total_steps, t0, c_full, progress, bar
                    )
        except Cancelled as e:
            partial = e.image if isinstance(e.image, torch.Tensor) else x
            image = self._finish(partial, content, plan, history, t0, mask) if partial is not None else None
            raise Cancelled(image, history) from e
        finally:
            bar.close()
        return self._finish(x, content, plan, history, t0, mask)

    def _init_image(
        self,
        prev: torch.Tensor | None,
        c_in: torch.Tensor,
        styles: list[Image.Image],
        plan: _Plan,
        gen: torch.Generator,
    ) -> torch.Tensor:
        h, w = c_in.shape[-2:]
        if prev is not None:
            x = F.interpolate(prev, size=(h, w), mode="bicubic", align_corners=False).clamp(0, 1)
        elif plan.init == "content":
            x = c_in.clone()
        elif plan.init == "noise":
            x = torch.rand(c_in.shape, generator=gen).to(self.device)
        else:  # style, blended by weight where several
            x = torch.zeros_like(c_in)
            for img, wt in zip(styles, plan.blend, strict=True):
                s = image_to_tensor(img.resize((w, h), Image.Resampling.LANCZOS), self.device)
                x += wt * (luminance_only(s) if plan.preserve_color else s)
        return x.detach().contiguous().requires_grad_(True)

    def _optimize(
        self,
        hooks: VGGFeatureHooks,
        x: torch.Tensor,
        targets: _Targets,
        plan: _Plan,
        scale: int,
        n_steps: int,
        history: list,
        total_steps: int,
        t0: float,
        c_full: torch.Tensor,
        progress: Callable[[StepInfo], bool | None] | None,
        bar: tqdm,
    ) -> torch.Tensor:
        lbfgs = plan.optimizer == "lbfgs"
        if lbfgs:
            opt: torch.optim.Optimizer = torch.optim.LBFGS(
                [x],
                lr=plan.lr,
                max_iter=n_steps,
                max_eval=n_steps,
                history_size=plan.history_size,
                tolerance_grad=0.0,
                tolerance_change=0.0,
                line_search_fn="strong_wolfe",
            )
        else:
            opt = torch.optim.Adam([x], lr=plan.lr)
        done = 0
        best: list = [math.inf, x.detach().clone()]
        size = (x.shape[-1], x.shape[-2])

        def closure() -> torch.Tensor:
            nonlocal done
            if done >= n_steps:  # the line search wants more than the budget allows
                raise _BudgetSpent
            opt.zero_grad(set_to_none=True)
            # L-BFGS sees the image through a clamp, so every point it evaluates is a valid image and
            # its line search sees one consistent function; Adam's iterate is projected instead.
            if not lbfgs:
                with torch.no_grad():
                    x.clamp_(0, 1)
            losses = self._losses(hooks, x.clamp(0, 1) if lbfgs else x, targets, plan)
            losses["total"].backward()
            done += 1
            values = {k: float(v.detach()) for k, v in losses.items()}
            if values["total"] < best[0]:
                best[0] = values["total"]
                best[1] = x.detach().clamp(0, 1)
            history.append({"step": len(history) + 1, "scale": scale, **values})
            bar.update(1)
            bar.set_postfix(loss=f"{values['total']:.4g}", refresh=False)
            if progress is not None:
                step = len(history)
                preview = None
                if plan.preview_every and (step % plan.preview_every == 0 or step == total_steps):
                    preview = self._to_output(best[1], c_full, plan)
                info = StepInfo(step, total_steps, scale, size, values, preview, time.perf_counter() - t0)
                if progress(info) is False:
                    raise Cancelled(best[1], history)
            return losses["total"]

        try:
            if lbfgs:
                while done < n_steps:  # each LBFGS.step stops at max_eval evaluations
                    opt.param_groups[0]["max_iter"] = opt.param_groups[0]["max_eval"] = n_steps - done
                    opt.step(closure)
            else:
                for _ in range(n_steps):
                    opt.step(closure)
        except _BudgetSpent:
            pass
        return best[1]

    def _losses(
        self, hooks: VGGFeatureHooks, x: torch.Tensor, targets: _Targets, plan: _Plan
    ) -> dict[str, torch.Tensor]:
        feats = self._features(hooks, x)
        if targets.mask is None:
            c = sum(content_loss(feats[n], targets.content[n]) for n in plan.content_layers)
            grams = {n: gram(feats[n]) for n in plan.style_layers}
        else:  # style where the mask is 1; content kept KEEP times harder where it is 0
            c = sum(
                content_loss(
                    feats[n], targets.content[n], mask=1 + (_KEEP - 1) * (1 - targets.mask_for(feats[n]))
                )
                for n in plan.content_layers
            )
            grams = {n: gram(feats[n], mask=targets.mask_for(feats[n])) for n in plan.style_layers}
            c = c + _PIXEL_KEEP * len(plan.content_layers) * content_loss(
                x, targets.pixels, mask=1 - targets.mask
            )
        c = c / len(plan.content_layers)
        s = style_loss(grams, targets.style, plan.style_layers)
        tv = total_variation(x)
        total = plan.content_weight * c + plan.style_weight * s + plan.tv_weight * tv
        return {
            "total": total,
            "content": plan.content_weight * c,
            "style": plan.style_weight * s,
            "tv": plan.tv_weight * tv,
        }

    def _to_output(
        self, x: torch.Tensor, c_full: torch.Tensor, plan: _Plan, mask: np.ndarray | None = None
    ) -> Image.Image:
        """The image a user sees: colours restored if asked, and the post-hoc mask blend if asked."""
        y = x.clamp(0, 1)
        if plan.preserve_color:
            y = merge_luminance(y, c_full)
        if mask is not None and plan.extra["mask_mode"] == "blend":
            m = resize_mask(mask, tuple(c_full.shape[-2:]), self.device)
            y = m * y + (1 - m) * c_full
        return tensor_to_image(y)

    def _finish(
        self,
        x: torch.Tensor,
        content: Image.Image,
        plan: _Plan,
        history: list,
        t0: float,
        mask: np.ndarray | None = None,
    ) -> Image.Image:
        c_full = image_to_tensor(resize_long_side(content, plan.size), self.device)
        if x.shape[-2:] != c_full.shape[-2:]:
            x = F.interpolate(x, size=c_full.shape[-2:], mode="bicubic", align_corners=False)
        img = self._to_output(x, c_full, plan, mask)
        img.info["nstcam"] = {
            "nstcam": __version__,
            "weights": self.weights.notice,
            "random_weights": self.weights.is_random,
            "device": str(self.device),
            "seconds": round(time.perf_counter() - t0, 3),
            "params": plan.as_dict(),
            "final_losses": history[-1] if history else None,
            "history": history,
        }
        return img


def _stylize_defaults() -> dict[str, Any]:
    import inspect

    sig = inspect.signature(StyleTransfer.stylize)
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and k not in ("progress", "progress_bar", "style_mask")
    }


def _expand_contents(contents: str | Path | Sequence[ImageSource]) -> list[ImageSource]:
    if isinstance(contents, (str, Path)):
        p = Path(contents)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS and f.is_file())
            if not files:
                raise ValueError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) in {p}")
            return files
        if any(ch in str(contents) for ch in "*?["):
            files = sorted(Path(f) for f in glob.glob(str(contents), recursive=True) if Path(f).is_file())
            if not files:
                raise ValueError(f"no files match {contents!r}")
            return files
        return [p]
    items = list(contents)
    if not items:
        raise ValueError("contents is empty")
    return items


def _output_names(items: list[ImageSource], ext: str) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        stem = Path(item).stem if isinstance(item, (str, Path)) else f"image{i:04d}"
        name = f"{stem}_stylized{ext}"
        if name in seen and isinstance(item, (str, Path)):
            name = f"{stem}_{Path(item).suffix.lstrip('.')}_stylized{ext}"
        k = 2
        while name in seen:
            name = f"{stem}_stylized_{k}{ext}"
            k += 1
        seen.add(name)
        names.append(name)
    return names
