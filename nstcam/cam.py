"""Grad-CAM and its family on torchvision ResNets (or any CNN), through forward hooks and a
gradient hook on the recorded activation.

Example:
    >>> cam = GradCAM("resnet50", weights="imagenet")
    >>> for r in cam.explain("cat.jpg", top_k=3):
    ...     print(r.label, r.score); r.overlay.save(f"{r.label}.png")
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from nstcam._cam_methods import GRADIENT_METHODS, METHODS, cam_from_weights
from nstcam._device import pick_device
from nstcam.hooks import HookManager, resolve_modules
from nstcam.image import ImageSource, image_to_tensor, load_image, normalize
from nstcam.weights import ARCHS, WeightsInfo, build_model, weights_info

__all__ = ["CAM_ARCHS", "CamResult", "GradCAM", "candidate_layers", "overlay_heatmap"]

logger = logging.getLogger(__name__)

CAM_ARCHS = tuple(a for a in ARCHS if a.startswith("resnet"))


def candidate_layers(model: nn.Module) -> list[str]:
    """Layers worth explaining: the top-level stages and their blocks (e.g. ``layer4``, ``layer4.2``)."""
    names = []
    for name, m in model.named_children():
        if isinstance(m, nn.Sequential) and len(m) and name.startswith("layer"):
            names.append(name)
            names.extend(f"{name}.{i}" for i in range(len(m)))
        elif isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d)):
            names.append(name)
    return names


def overlay_heatmap(
    image: Image.Image, heatmap: np.ndarray, *, colormap: str = "jet", alpha: float = 0.5
) -> Image.Image:
    """Blends a [0, 1] heatmap, coloured with a matplotlib colormap, over an RGB image.

    ``out = (1 - alpha) * image + alpha * colormap(heatmap)``; the heatmap is resized to the image.
    """
    from matplotlib import colormaps

    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    img = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    h, w = img.shape[:2]
    if heatmap.shape != (h, w):
        heatmap = np.asarray(Image.fromarray(heatmap.astype(np.float32), "F").resize((w, h), Image.BILINEAR))
    colour = colormaps[colormap](np.clip(heatmap, 0, 1))[..., :3].astype(np.float32)  # RGBA -> RGB
    out = (1 - alpha) * img + alpha * colour
    return Image.fromarray(np.clip(out * 255 + 0.5, 0, 255).astype(np.uint8), "RGB")


@dataclass
class CamResult:
    """One class's explanation of one image.

    Attributes:
        heatmap: float32 H x W in [0, 1] at the original image's size.
        raw: the map at the layer's resolution, before upsampling (ReLU applied, not normalised).
        class_index: the class explained.
        label: its name.
        score: its softmax probability.
        image: the input image (RGB).
        method: the CAM method.
        layer: the target layer.
        weights: where the model's weights came from.
    """

    heatmap: np.ndarray
    raw: np.ndarray
    class_index: int
    label: str
    score: float
    image: Image.Image = field(repr=False)
    method: str = "gradcam"
    layer: str = "layer4"
    weights: WeightsInfo | None = field(default=None, repr=False)
    colormap: str = "jet"
    alpha: float = 0.5

    @property
    def overlay(self) -> Image.Image:
        """The heatmap over the image (``colormap``, ``alpha``; see :func:`overlay_heatmap`)."""
        return overlay_heatmap(self.image, self.heatmap, colormap=self.colormap, alpha=self.alpha)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no pixel data)."""
        random = bool(self.weights and self.weights.is_random)
        return {
            "class_index": self.class_index,
            "label": self.label,
            "score": round(self.score, 6),
            "method": self.method,
            "layer": self.layer,
            "heatmap_size": [int(self.heatmap.shape[1]), int(self.heatmap.shape[0])],
            "random_weights": random,
            "weights": self.weights.notice if self.weights else "custom model",
        }


def _normalize_maps(m: torch.Tensor) -> torch.Tensor:
    """Per-map min-max to [0, 1]; an all-constant map becomes zeros."""
    flat = m.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    span = hi - lo
    out = torch.where(
        span > 0, (flat - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(flat)
    )
    return out.view_as(m)


class _CamHooks(HookManager):
    """The Grad-CAM engine's hook manager: one layer, cut from the graph so backward stops there."""

    def __init__(self, model: nn.Module, layer: str) -> None:
        super().__init__(model, [layer], grad_leaf=True, capture_grads=True)
        self.layer = layer

    @property
    def activation(self) -> torch.Tensor:
        return self.outputs[self.layer]

    @property
    def gradient(self) -> torch.Tensor:
        return self.grads[self.layer]


class GradCAM:
    """Class activation maps for a CNN classifier.

    The forward pass runs without autograd up to the target layer; a forward hook records that
    layer's output as a fresh leaf and a gradient hook on it receives d(score)/d(activation), so the
    backward pass stops at the target layer and costs little more than one forward pass. Parameters'
    ``.grad`` are never touched, training flags are restored, and it works inside ``torch.no_grad()``
    or ``torch.inference_mode()``.

    Args:
        arch: ``"resnet18"``, ``"resnet34"``, ``"resnet50"``, ``"resnet101"`` or ``"resnet152"``.
        weights: ``"imagenet"``, ``"random"`` or a state dict path (see :func:`nstcam.build_model`).
        target_layer: a name from ``model.named_modules()``, e.g. ``"layer4"`` or ``"layer3.1"``.
        method: one of ``"gradcam"``, ``"gradcam++"``, ``"xgradcam"``, ``"layercam"``,
            ``"hirescam"``, ``"scorecam"``.
        device: where to run; default CUDA, else MPS, else CPU.
        model: any classifier ``nn.Module`` returning logits (N, classes); replaces ``arch``.
        input_size: images are resized so their shorter side has this many pixels.
        scorecam_batch: masked images per forward pass in Score-CAM (bounds its memory).
        colormap: matplotlib colormap of overlays.
        alpha: opacity of the heatmap in overlays.
    """

    def __init__(
        self,
        arch: str = "resnet50",
        weights: str | Path = "imagenet",
        target_layer: str = "layer4",
        method: str = "gradcam",
        device: torch.device | str | None = None,
        model: nn.Module | None = None,
        *,
        input_size: int = 224,
        scorecam_batch: int = 32,
        colormap: str = "jet",
        alpha: float = 0.5,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
        if model is None:
            if arch not in CAM_ARCHS:
                raise ValueError(f"arch must be one of {', '.join(CAM_ARCHS)}; got {arch!r}")
            model = build_model(arch, weights)
        self.device = pick_device(device)
        self.model = model.to(self.device)
        resolve_modules(self.model, [target_layer])  # fail early, listing close names
        info = weights_info(model)
        self.arch = info.arch if info is not None else type(model).__name__
        self.target_layer = target_layer
        self.method = method
        self.input_size = int(input_size)
        self.scorecam_batch = int(scorecam_batch)
        self.colormap = colormap
        self.alpha = alpha
        self.weights = weights_info(model)
        if self.weights is not None:
            self.categories = list(self.weights.categories)
        else:
            from torchvision.models import ResNet50_Weights

            self.categories = list(ResNet50_Weights.DEFAULT.meta["categories"])
        if self.weights is not None and self.weights.is_random:
            logger.warning("%s", self.weights.notice)

    # -- public API ---------------------------------------------------------------------------
    def explain(self, image: ImageSource, target: int | None = None, top_k: int = 1) -> list[CamResult]:
        """Explains one image: the top-``top_k`` classes, or the class ``target``.

        Returns:
            One :class:`CamResult` per class, highest score first (or the single ``target``).
        """
        img = load_image(image)
        x = self.preprocess(img)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        maps, raw, probs, classes = self._run(
            x, targets=target, top_k=top_k, out_size=(img.height, img.width)
        )
        results = []
        for j, cls in enumerate(classes[0]):
            results.append(
                CamResult(
                    heatmap=maps[j][0].float().cpu().numpy(),
                    raw=raw[j][0].float().cpu().numpy(),
                    class_index=int(cls),
                    label=self.label(int(cls)),
                    score=float(probs[0, cls]),
                    image=img,
                    method=self.method,
                    layer=self.target_layer,
                    weights=self.weights,
                    colormap=self.colormap,
                    alpha=self.alpha,
                )
            )
        return results

    def compute(
        self, x: torch.Tensor, targets: int | Sequence[int] | torch.Tensor | None = None, *, raw: bool = False
    ) -> torch.Tensor:
        """Maps for an already normalised batch ``x`` (N, 3, H, W).

        Args:
            x: the batch, ImageNet-normalised.
            targets: None for each image's top-1 class, one class for all, or one class per image.
            raw: return the maps at the layer's resolution (ReLU only) instead.

        Returns:
            (N, H, W) maps in [0, 1] at the input's size (or (N, h, w) raw maps).
        """
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"x must be a batch of shape (N, 3, H, W), got {tuple(x.shape)}")
        maps, raws, _, _ = self._run(x.to(self.device), targets=targets, out_size=tuple(x.shape[-2:]))
        return raws[0] if raw else maps[0]

    def preprocess(self, img: Image.Image) -> torch.Tensor:
        """Resizes (shorter side to ``input_size``) and normalises one image into a (1, 3, H, W) batch."""
        w, h = img.size
        s = self.input_size / min(w, h)
        size = (max(1, round(w * s)), max(1, round(h * s)))
        return normalize(image_to_tensor(img.resize(size, Image.Resampling.BILINEAR), self.device))

    def label(self, index: int) -> str:
        """The name of class ``index``."""
        return self.categories[index] if 0 <= index < len(self.categories) else f"class {index}"

    @property
    def layers(self) -> list[str]:
        """Layers of the model that make sense as targets."""
        return candidate_layers(self.model)

    # -- the work -----------------------------------------------------------------------------
    def _targets(self, logits: torch.Tensor, targets: Any, top_k: int) -> torch.Tensor:
        """(k, N) class indices: row j holds each image's j-th target."""
        n, num_classes = logits.shape
        if targets is None:
            k = min(top_k, num_classes)
            return logits.topk(k, dim=1).indices.T.contiguous()
        if isinstance(targets, int) or (isinstance(targets, torch.Tensor) and targets.ndim == 0):
            t = torch.full((n,), int(targets), dtype=torch.long)
        else:
            t = (
                torch.as_tensor(list(targets) if not isinstance(targets, torch.Tensor) else targets)
                .long()
                .cpu()
            )
            if t.ndim != 1 or len(t) != n:
                raise ValueError(
                    f"targets has {t.numel()} entries for a batch of {n} images; give one per image"
                )
        bad = [int(v) for v in t if not 0 <= int(v) < num_classes]
        if bad:
            raise ValueError(
                f"target class {bad[0]} is out of range: the model has {num_classes} classes "
                f"(0-{num_classes - 1})"
            )
        return t.to(logits.device).unsqueeze(0)

    def _run(
        self, x: torch.Tensor, *, targets: Any = None, top_k: int = 1, out_size: tuple[int, int]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
        modes = {m: m.training for m in self.model.modules()}
        self.model.eval()
        try:
            with (
                torch.inference_mode(False),
                torch.no_grad(),
                _CamHooks(self.model, self.target_layer) as hooks,
            ):
                x = x.clone() if x.is_inference() else x
                logits = self.model(x)  # grad mode switches on at the target layer
                if hooks.outputs.get(self.target_layer) is None:
                    raise RuntimeError(f"layer {self.target_layer!r} did not run in the forward pass")
                if logits.ndim != 2:
                    raise ValueError(
                        f"the model must return logits of shape (N, classes), got {tuple(logits.shape)}"
                    )
                act = hooks.activation
                if act.ndim != 4:
                    raise ValueError(
                        f"layer {self.target_layer!r} outputs shape {tuple(act.shape)}; CAM needs "
                        "(N, C, h, w): choose a convolutional layer"
                    )
                classes = self._targets(logits.detach(), targets, top_k)
                probs = logits.detach().float().softmax(1)
                raws = []
                if self.method != "scorecam":
                    for j in range(classes.shape[0]):
                        with torch.enable_grad():
                            score = logits.gather(1, classes[j].view(-1, 1)).sum()
                            torch.autograd.grad(score, act, retain_graph=j < classes.shape[0] - 1)
                        cam = GRADIENT_METHODS[self.method](act.detach().float(), hooks.gradient.float())
                        raws.append(torch.relu(cam))
                act = act.detach()
                del logits
            if self.method == "scorecam":  # forward passes only, with the hooks gone
                with torch.inference_mode(False), torch.no_grad():
                    raws = [torch.relu(self._scorecam(x, act, classes[j])) for j in range(classes.shape[0])]
        finally:
            for m, t in modes.items():
                m.training = t
        maps = []
        for r in raws:
            up = F.interpolate(
                _normalize_maps(r).unsqueeze(1), size=out_size, mode="bilinear", align_corners=False
            )
            maps.append(_normalize_maps(up.squeeze(1)))
        return maps, raws, probs, classes.T.cpu()

    @torch.no_grad()
    def _scorecam(self, x: torch.Tensor, act: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """Wang et al. 2020: each channel, upsampled and min-max normalised, masks the input; its
        weight is the softmax score of the target class on the masked input. Chunked by
        ``scorecam_batch`` so memory stays bounded."""
        n, c = act.shape[:2]
        weights = torch.empty(n, c, device=act.device)
        for i in range(n):
            up = F.interpolate(
                act[i : i + 1].float(), size=x.shape[-2:], mode="bilinear", align_corners=False
            )[0]
            masks = _normalize_maps(up)  # (C, H, W)
            for s in range(0, c, self.scorecam_batch):
                m = masks[s : s + self.scorecam_batch].unsqueeze(1)
                logits = self.model(x[i : i + 1] * m)
                weights[i, s : s + len(m)] = logits.float().softmax(1)[:, classes[i]]
        return cam_from_weights(act.float(), weights)
