"""The Grad-CAM engine: :class:`GradCAM`, CAM maps for ResNets (or any CNN) through a forward hook
and a gradient hook on the recorded activation.

Example:
    >>> cam = GradCAM("resnet50", weights="imagenet")
    >>> for r in cam.explain("cat.jpg", top_k=3):
    ...     print(r.label, r.score); r.overlay.save(f"{r.label}.png")
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn

from nstcam._checks import finite, whole
from nstcam._device import pick_device
from nstcam.cam._maps import scorecam, upsample_maps
from nstcam.cam._targets import resolve_targets
from nstcam.cam.hooks import CamHooks, eval_view
from nstcam.cam.layers import CAM_ARCHS, candidate_layers, check_layer
from nstcam.cam.methods import GRADIENT_METHODS, METHODS
from nstcam.cam.result import CamResult
from nstcam.image import ImageSource, image_to_tensor, load_image, normalize, resize_long_side
from nstcam.weights import build_model, weights_info

__all__ = ["GradCAM"]

logger = logging.getLogger(__name__)


class GradCAM:
    """Class activation maps for a CNN classifier.

    The forward pass runs without autograd up to the target layer; a forward hook records that
    layer's output as a fresh leaf and a gradient hook on it receives d(score)/d(activation), so the
    backward pass stops at the target layer and costs little more than one forward pass. Parameters'
    ``.grad`` are never touched, and it works inside ``torch.no_grad()`` or ``torch.inference_mode()``.

    Thread safety: a call changes nothing that another call can see. Its hooks record only its own
    passes, and the model's training flags are never flipped (a model with modules in training mode
    is explained through an eval-mode twin that shares its tensors), so any number of threads may
    call one ``GradCAM``, or several ``GradCAM`` objects sharing one network, at once.

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
        self.input_size = whole("input_size", input_size, minimum=16)
        self.scorecam_batch = whole("scorecam_batch", scorecam_batch, minimum=1)
        self.alpha = finite("alpha", alpha, minimum=0, maximum=1)
        if model is None:
            if arch not in CAM_ARCHS:
                raise ValueError(f"arch must be one of {', '.join(CAM_ARCHS)}; got {arch!r}")
            model = build_model(arch, weights)
        self.device = pick_device(device)
        self.model = _on_device(model, self.device)
        check_layer(self.model, target_layer)  # fail early, listing close names
        info = weights_info(model)
        self.arch = info.arch if info is not None else type(model).__name__
        self.target_layer = target_layer
        self.method = method
        self.colormap = colormap
        self.weights = weights_info(model)
        if self.weights is not None:
            self.categories = list(self.weights.categories)
        else:
            from torchvision.models import ResNet50_Weights

            self.categories = list(ResNet50_Weights.DEFAULT.meta["categories"])
        if self.weights is not None and self.weights.is_random:
            logger.warning("%s", self.weights.notice)

    # -- public API ---------------------------------------------------------------------------
    def explain(
        self,
        image: ImageSource,
        target: int | None = None,
        top_k: int = 1,
        *,
        max_side: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[CamResult]:
        """Explains one image: the top-``top_k`` classes, or the class ``target``.

        Args:
            image: anything :func:`nstcam.load_image` takes.
            target: explain this class instead of the top ones.
            top_k: how many of the highest-scoring classes to explain.
            max_side: heatmaps and overlays at the image's size, or with their long side capped at
                this many pixels (the network sees the same ``input_size`` input either way): a
                36 MP photo then costs what a 1 MP one does.
            progress: Score-CAM only: called as ``progress(done, total)`` with the masked images
                scored so far, after each forward pass.

        Returns:
            One :class:`CamResult` per class, highest score first (or the single ``target``).
        """
        top_k = whole("top_k", top_k, minimum=1)
        if target is not None:
            target = whole("target", target, minimum=0)
        if max_side is not None:
            max_side = whole("max_side", max_side, minimum=16)
        img = load_image(image)
        if max_side is not None and max(img.size) > max_side:
            img = resize_long_side(img, max_side)
        x = self.preprocess(img)
        maps, raw, probs, classes = self._run(
            x, targets=target, top_k=top_k, out_size=(img.height, img.width), progress=progress
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
        self,
        x: torch.Tensor,
        targets: int | Sequence[int] | torch.Tensor | None = None,
        *,
        raw: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> torch.Tensor:
        """Maps for an already normalised batch ``x`` (N, 3, H, W).

        Args:
            x: the batch, ImageNet-normalised.
            targets: None for each image's top-1 class, one class for all, or one class per image.
            raw: return the maps at the layer's resolution (ReLU only) instead.
            progress: Score-CAM only: called as ``progress(done, total)`` after each forward pass.

        Returns:
            (N, H, W) maps in [0, 1] at the input's size (or (N, h, w) raw maps).
        """
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"x must be a batch of shape (N, 3, H, W), got {tuple(x.shape)}")
        maps, raws, _, _ = self._run(
            x.to(self.device), targets=targets, out_size=tuple(x.shape[-2:]), progress=progress
        )
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
    def _run(
        self,
        x: torch.Tensor,
        *,
        targets: Any = None,
        top_k: int = 1,
        out_size: tuple[int, int],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
        model = eval_view(self.model)
        with torch.inference_mode(False), torch.no_grad(), CamHooks(model, self.target_layer) as hooks:
            x = x.clone() if x.is_inference() else x
            logits = model(x)  # grad mode switches on at the target layer
            act = self._activation(hooks, logits)
            classes = resolve_targets(logits.detach(), targets, top_k)
            probs = logits.detach().float().softmax(1)
            raws = [] if self.method == "scorecam" else self._gradient_maps(hooks, logits, act, classes)
            act = act.detach()
            del logits
        if self.method == "scorecam":  # forward passes only, with the hooks gone
            raws = self._scorecam_maps(model, x, act, classes, progress)
        maps = [upsample_maps(r, out_size) for r in raws]
        return maps, raws, probs, classes.T.cpu()

    def _scorecam_maps(
        self,
        model: nn.Module,
        x: torch.Tensor,
        act: torch.Tensor,
        classes: torch.Tensor,
        progress: Callable[[int, int], None] | None,
    ) -> list[torch.Tensor]:
        total = classes.shape[0] * act.shape[0] * act.shape[1]
        done = 0

        def on_chunk(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, total)

        with torch.inference_mode(False), torch.no_grad():
            return [
                torch.relu(scorecam(model, x, act, classes[j], self.scorecam_batch, on_chunk))
                for j in range(classes.shape[0])
            ]

    def _activation(self, hooks: CamHooks, logits: torch.Tensor) -> torch.Tensor:
        if hooks.outputs.get(self.target_layer) is None:
            raise RuntimeError(f"layer {self.target_layer!r} did not run in the forward pass")
        if logits.ndim != 2:
            raise ValueError(f"the model must return logits of shape (N, classes), got {tuple(logits.shape)}")
        act = hooks.activation
        if act.ndim != 4:
            raise ValueError(
                f"layer {self.target_layer!r} outputs shape {tuple(act.shape)}; CAM needs "
                "(N, C, h, w): choose a convolutional layer"
            )
        return act

    def _gradient_maps(
        self, hooks: CamHooks, logits: torch.Tensor, act: torch.Tensor, classes: torch.Tensor
    ) -> list[torch.Tensor]:
        """One raw map per row of ``classes``; autograd is asked for d(score)/d(act) only."""
        raws = []
        for j in range(classes.shape[0]):
            with torch.enable_grad():
                score = logits.gather(1, classes[j].view(-1, 1)).sum()
                torch.autograd.grad(score, act, retain_graph=j < classes.shape[0] - 1)
            cam = GRADIENT_METHODS[self.method](act.detach().float(), hooks.gradient.float())
            raws.append(torch.relu(cam))
        return raws

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(arch={self.arch!r}, target_layer={self.target_layer!r}, "
            f"method={self.method!r}, device={str(self.device)!r})"
        )


def _on_device(model: nn.Module, device: torch.device) -> nn.Module:
    """Moves ``model`` only if some tensor is elsewhere: a model shared with running calls is not
    touched (``.to`` reassigns every parameter's data even when nothing moves)."""

    def elsewhere(t: torch.Tensor) -> bool:
        return t.device.type != device.type or (device.index is not None and t.device != device)

    if any(elsewhere(t) for t in itertools.chain(model.parameters(), model.buffers())):
        model.to(device)
    return model
