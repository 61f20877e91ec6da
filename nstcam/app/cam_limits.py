"""A Grad-CAM request checked against this server's limits before any model is built: the method,
the model offered, its layer, and a perturbation method's budget of masked images."""

from __future__ import annotations

from typing import Any

from nstcam.app.config import AppConfig, Models
from nstcam.app.errors import refuse
from nstcam.app.files import load_upload
from nstcam.app.layers import check_layer, default_layer, layer_choices, meta_layers
from nstcam.app.running import check
from nstcam.cam import METHODS, PERTURBATION_METHODS, REGISTRY, arch_kind

__all__ = ["cam_request", "check_scorecam"]


def check_scorecam(
    cfg: AppConfig, arch: str, layer: str, top_k: int, method: str = "scorecam", aug_smooth: bool = False
) -> None:
    """Refuses a perturbation method's request over the server's budget (one forward pass per
    channel and class; SS-CAM and IS-CAM: per sample too; augmentation: 6 times), advising only
    what would fit."""
    channels = meta_layers(arch)
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


def cam_request(
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
    check(top_k, "top-k", 1, 10)
    if method not in METHODS:
        raise refuse(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    archs = archs or models.config.cam_archs
    if model not in archs:  # before any model is built, even a skeleton
        raise refuse(f"model must be one of {', '.join(archs)} on this server, got {model!r}")
    if not layer:
        layer = default_layer(model)  # empty: the model's default
    check_layer(model, layer, layer_choices(model))
    if method in PERTURBATION_METHODS and arch_kind(model) == "classifier":
        check_scorecam(models.config, model, layer, int(top_k), method, bool(aug_smooth))
    return load_upload(image, "image"), models.cam(model, layer, method)
