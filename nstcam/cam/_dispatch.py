"""From a request to raw maps: the method's pass (or its captured CUDA graph), each target layer,
the fusion of several, and test-time augmentation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nstcam.cam._graphed import CamGraphs, Outputs
from nstcam.cam._maps import model_output
from nstcam.cam._request import Request
from nstcam.cam._smooth import OTHERS, augmented, augmented_batch, deaugmented, fuse_maps
from nstcam.cam.kinds import model_kind
from nstcam.cam.registry import TARGET_METHODS, method
from nstcam.cam.targets.classes import host_targets, resolve_targets
from nstcam.cam.targets.objects import ClassTarget, check_boxes, check_fit, flip_target, per_image
from nstcam.cam.targets.perturbation import TargetOptions, target_maps
from nstcam.cam.targets.scored import scored_model
from nstcam.hooks import HookManager
from nstcam.layouts import input_grid

__all__ = ["Spec", "class_maps", "explain_targets", "object_maps", "raw_maps", "split_targets"]

_ONE_TENSOR = ("one-pass", "perturbation")


@dataclass(frozen=True)
class Spec:
    """What an engine explains with (read from it at each call)."""

    method: str
    layers: tuple[str, ...]
    layouts: tuple[str | None, ...]
    fuse: str
    chunk: int
    seed: int
    n_samples: int | None
    std: float | None
    graphs: CamGraphs | None
    num_classes: int | None

    @classmethod
    def of(cls, cam: Any, *, graphs: bool = True) -> Spec:
        """What the engine ``cam`` explains with now (without its CUDA graphs: ``graphs=False``)."""
        kept = (cam._graphs, cam._num_classes) if graphs else (None, None)
        options = (cam.fuse, cam.scorecam_batch, cam.seed, cam.n_samples, cam.noise_std)
        return cls(cam.method, cam.target_layers, cam.layouts, *options, *kept)


def raw_maps(
    spec: Spec,
    model: nn.Module,
    x: torch.Tensor,
    targets: Any,
    top_k: int,
    progress: Callable[[int, int], None] | None,
    aug_smooth: bool,
    eigen_smooth: bool,
) -> Outputs:
    """(k, N, h, w) raw maps, (N, classes) probabilities and (k, N) classes for ``x``."""
    if eigen_smooth and not method(spec.method).eigen:
        raise ValueError(
            f"eigen_smooth projects weighted activations; method {spec.method!r} has none: leave it off"
        )

    def run(inp: torch.Tensor, fixed: torch.Tensor | None) -> Outputs:
        return _layers(spec, model, inp, targets, top_k, fixed, progress, eigen_smooth)

    return augmented(run, x) if aug_smooth else run(x, None)


def class_maps(spec: Spec, model: nn.Module, x: torch.Tensor, classes: torch.Tensor) -> Outputs:
    """Raw maps (k, N, *grid) of the given (k, N) ``classes``: one forward pass, k backward passes."""
    return _layers(spec, model, x, None, classes.shape[0], classes, None, False)


def _layers(spec, model, x, targets, top_k, fixed, progress, eigen_smooth) -> Outputs:
    """Every target layer's maps, fused at the input's size if several; the first layer's pass picks
    the classes (``fixed``: given), the others explain the same ones."""
    per_layer = []
    probs = classes = None
    for layer, layout in zip(spec.layers, spec.layouts, strict=True):
        chosen = fixed if fixed is not None else classes
        raws, p, c = _one_layer(spec, model, layer, layout, x, targets, top_k, chosen, progress, eigen_smooth)
        per_layer.append(raws)
        if probs is None:
            probs, classes = p, c
    if len(per_layer) == 1:
        return per_layer[0], probs, classes
    return fuse_maps(per_layer, spec.fuse, input_grid(x)), probs, classes


def _one_layer(spec, model, layer, layout, x, targets, top_k, fixed, progress, eigen_smooth) -> Outputs:
    def resolve(logits: torch.Tensor) -> torch.Tensor:
        return fixed if fixed is not None else resolve_targets(logits, targets, top_k)

    plain = fixed is None and not eigen_smooth and len(spec.layers) == 1
    if plain and method(spec.method).graphed:
        out = _graphed(spec, model, layer, layout, x, targets, top_k)
        if out is not None:
            return out
    req = Request(
        model,
        layer,
        x,
        resolve,
        spec.chunk,
        progress,
        layout,
        eigen_smooth,
        spec.seed,
        spec.n_samples,
        spec.std,
    )
    return method(spec.method).run(req)


def _graphed(spec, model, layer, layout, x, targets, top_k) -> Outputs | None:
    """The pass replayed from a captured CUDA graph, or None where it runs eagerly (no graphs, or
    the number of classes not yet known for checking ``targets``/``top_k`` on the host)."""
    if spec.graphs is None or spec.num_classes is None:
        return None
    hosted = host_targets(targets, top_k, x.shape[0], spec.num_classes)
    if isinstance(hosted, int):
        classes: torch.Tensor | int = hosted
    else:
        classes = torch.tensor(hosted, dtype=torch.long, device=x.device).unsqueeze(0)
    return spec.graphs.run(model, layer, method(spec.method).formula, x, classes, layout)


def object_maps(
    name: str,
    model: nn.Module,
    layer: str,
    layout: str | None,
    x: torch.Tensor,
    rows: Callable[[Any], Any],
    eigen_smooth: bool,
    options: TargetOptions,
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(raw maps (k, N, h, w), scores (k, N), the detached output) of the target rows ``rows`` picks
    from the model's output, with any method of :data:`TARGET_METHODS` (``name``): the one-pass and
    perturbation ones in :func:`target_maps`, the others through their class pass on :func:`scored_model`."""
    record = method(name)
    if record.targets in _ONE_TENSOR:
        return target_maps(model, layer, name, x, rows, layout, eigen_smooth=eigen_smooth, options=options)
    with torch.inference_mode(False), torch.no_grad(), HookManager(model, [layer], detach=True) as hooks:
        out = model_output(model(x))
        if not record.whole_network and isinstance(hooks.outputs.get(layer), dict):
            raise ValueError(
                f"method {name!r} reads one tensor at the layer; {layer!r} gives a dict of levels (an "
                f"FPN's), which {', '.join(_one_pass())} read: choose one of them, or a layer inside "
                "the backbone's body"
            )
    spec = Spec(
        name,
        (layer,),
        (layout,),
        "mean",
        options.chunk,
        options.seed,
        options.n_samples,
        options.std,
        None,
        1,
    )
    raws, scores = [], []
    for row in rows(out):
        net, first = scored_model(model, row)
        r, _, _ = raw_maps(spec, net, x, 0, 1, options.progress, False, eigen_smooth)
        raws.append(r[0])
        scores.append(first[0])
    if not raws:
        return x.new_zeros(0, x.shape[0], 1, 1), x.new_zeros(0, x.shape[0]), out
    return torch.stack(raws), torch.stack(scores), out


def _one_pass() -> list[str]:
    return [name for name in TARGET_METHODS if method(name).targets == "one-pass"]


def split_targets(targets: Any, n: int, name: str) -> tuple[list[Any] | None, Any]:
    """(one target object per image, or None; the class targets): a method without a target pass
    takes a :class:`ClassTarget` of a logit as the class index it is (CAM, Finer-CAM, ShapleyCAM,
    Smooth Grad-CAM++, FullGrad, guided backprop, LeGrad explain classes)."""
    objects = per_image(targets, n)
    if objects is None or name in TARGET_METHODS:
        return objects, targets
    if all(isinstance(t, ClassTarget) and not t.softmax for t in objects):
        return None, [t.index for t in objects]
    return objects, targets


def explain_targets(
    spec: Spec,
    model: nn.Module,
    x: torch.Tensor,
    targets: list[Any],
    aug_smooth: bool,
    eigen_smooth: bool,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, h, w) raw maps (at the input's size if several layers or ``aug_smooth``) and (N,) target
    scores for target objects, one per image (:mod:`nstcam.cam.targets`). ``aug_smooth``: the five
    other augmentations explain the targets flipped with their image (:func:`flip_target`).

    Raises:
        ValueError: a method without a target pass, a target that does not fit the model's output, or
            a callable with ``aug_smooth``; before any work.
    """
    if spec.method not in TARGET_METHODS:
        raise ValueError(
            f"method {spec.method!r} explains class indices (or a ClassTarget's logit); with other target "
            f"objects use one of {', '.join(TARGET_METHODS)}"
        )
    check_fit(targets, model_kind(model))
    check_boxes(targets, x.shape[-1], x.shape[-2])
    flipped = [flip_target(t, x.shape[-1]) for t in targets] if aug_smooth else []
    raws, scores = _targets_once(spec, model, x, targets, eigen_smooth, progress)
    if not aug_smooth:
        return raws, scores
    rows = [f if flip else t for flip, _ in OTHERS for t, f in zip(targets, flipped, strict=True)]
    more, _ = _targets_once(spec, model, augmented_batch(x), rows, eigen_smooth, progress)
    return deaugmented(raws[None], more[None], tuple(x.shape[-2:]))[0], scores


def _targets_once(spec, model, x, targets, eigen_smooth, progress) -> tuple[torch.Tensor, torch.Tensor]:
    per_layer, scores = [], None
    options = TargetOptions(spec.chunk, spec.seed, spec.n_samples, spec.std, progress)
    for layer, layout in zip(spec.layers, spec.layouts, strict=True):
        raws, s, _ = object_maps(
            spec.method, model, layer, layout, x, lambda _out: [targets], eigen_smooth, options
        )
        per_layer.append(raws)
        scores = s if scores is None else scores
    if len(per_layer) == 1:
        return per_layer[0][0], scores[0]
    return fuse_maps(per_layer, spec.fuse, input_grid(x))[0], scores[0]
