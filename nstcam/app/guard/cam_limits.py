"""A Grad-CAM request checked against this server's limits before any model is built: the method,
the model offered, its layer, and a perturbation method's budget of masked images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nstcam._choices import one_of
from nstcam.app.config import Models
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.cost import request_cost
from nstcam.app.guard.inputs import load_upload, upload_size
from nstcam.app.guard.shapes import check_aspect
from nstcam.app.layers import check_layer, default_layer, layer_choices
from nstcam.cam import METHODS, arch_kind

__all__ = ["cam_model", "cam_request", "image_size"]


def cam_model(
    models: Models, image: Any, model: str, layer: str, archs: tuple[str, ...] | None = None
) -> str:
    """Checks that an image was sent, the model is offered (``archs``, default the server's
    classifiers) and the layer is one of its own, before any model is built; returns the layer (empty:
    the model's default)."""
    if image is None:
        raise refuse("Upload an image.")
    archs = archs or models.config.cam_archs
    one_of("model", model, archs, also=" on this server", error=refuse)  # before any model is built
    if not layer:
        layer = default_layer(model)  # empty: the model's default
    check_layer(model, layer, layer_choices(model))
    return layer


def image_size(image: Any, model: str) -> tuple[int, int]:
    """The upload's size from its header (nothing decoded), its shape held to
    :data:`nstcam.app.guard.shapes.MAX_ASPECT` where ``model`` scales its short side (a classifier, a
    segmenter; a detector bounds its long side itself)."""
    size = upload_size(image, "image")
    if arch_kind(model) != "detector":
        check_aspect(Path(str(image)).name, size)
    return size


def cam_request(
    models: Models,
    image: Any,
    model: str,
    layer: str,
    method: str,
    top_k: float,
    aug_smooth: bool = False,
    archs: tuple[str, ...] | None = None,
    endpoint: str = "gradcam",
) -> tuple:
    """Checks a Grad-CAM request against the server's limits; returns (image, the engine's key
    ``(model, layer, method)`` for :meth:`~nstcam.app.config.Models.cam`, the request's
    :class:`~nstcam.app.guard.cost.Cost`). ``archs``: the models this request may use (default: the
    server's classifiers); ``endpoint``: whose cost estimate it is held to
    (:func:`nstcam.app.guard.cost.request_cost`: ``faithfulness`` adds its curves)."""
    if image is None:
        raise refuse("Upload an image.")
    check(top_k, "top-k", 1, 10)
    one_of("method", method, METHODS, error=refuse)
    layer = cam_model(models, image, model, layer, archs)
    size = image_size(image, model)
    cost = request_cost(
        endpoint, models.config, model, layer, int(top_k), method, bool(aug_smooth), image_size=size
    ).check()
    img = load_upload(image, "image")
    models.cam(model, layer, method)  # built (or refused) here, in the request's thread
    return img, (model, layer, method), cost
