"""Methods that cannot work on a model or layer, refused before any work with the reason and a
method that works instead."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from nstcam._checks import finite, whole
from nstcam.cam._fullgrad import bias_layers
from nstcam.cam._guided import has_relu
from nstcam.cam._legrad import legrad_block
from nstcam.cam._smooth import FUSIONS
from nstcam.cam._target_pass import model_kind
from nstcam.cam.layers import check_layer, reading
from nstcam.cam.methods import METHODS

__all__ = ["check_method", "method_options", "read_layers"]


def method_options(
    method: str, fuse: str, n_samples: int | None, std: float | None, seed: int
) -> tuple[str, int | None, float | None, int]:
    """The method and its options checked: (fuse, n_samples, std, seed)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if fuse not in FUSIONS:
        raise ValueError(f"fuse must be one of {', '.join(FUSIONS)}; got {fuse!r}")
    n = None if n_samples is None else whole("n_samples", n_samples, minimum=1, maximum=1000)
    return fuse, n, None if std is None else finite("std", std, minimum=0), whole("seed", seed, minimum=0)


def read_layers(
    model: nn.Module,
    arch: str,
    target_layer: str | Sequence[str] | None,
    layout: str | None,
    input_size: int | None,
) -> tuple[tuple[str, ...], tuple[str | None, ...], int, int | None]:
    """(layers, their layouts, input size, square size or None) for one target layer or several
    (see :func:`nstcam.cam.layers.reading`); each layer checked to exist, listing close names."""
    one = target_layer is None or isinstance(target_layer, str)
    names = [target_layer] if one else list(target_layer)
    if not names:
        raise ValueError("target_layer must name at least one layer (or be None for the default)")
    readings = [reading(model, arch, name, layout, input_size) for name in names]
    for r in readings:
        check_layer(model, r[0])
    _, _, size, square = readings[0]
    layouts = tuple(r[1] for r in readings)
    if model_kind(model) == "detector":  # CNN levels of an input it resizes itself: never read from the shape
        layouts = tuple(lay or "nchw" for lay in layouts)
    return tuple(r[0] for r in readings), layouts, size, square


_NO_LAYER = ("fullgrad", "guided-backprop")  # they read the whole network, not a layer


def check_method(model: nn.Module, method: str, layers: Sequence[str]) -> None:
    """Raises ValueError where ``method`` cannot explain ``model`` at ``layers``."""
    if method == "cam" and not any(isinstance(m, nn.Linear) for m in model.modules()):
        raise ValueError(
            f"method 'cam' uses the classifier's linear weights, and a {type(model).__name__} has no "
            "nn.Linear: use method='gradcam'"
        )
    if method == "legrad":
        for layer in layers:
            legrad_block(model, layer)
    if method in ("guided-backprop", "guided-gradcam") and not has_relu(model):
        raise ValueError(
            f"method {method!r} guides nn.ReLU modules, and a {type(model).__name__} has none (GELU, "
            "SiLU...): use method='layercam' or 'fullgrad'"
        )
    if method == "fullgrad" and not bias_layers(model):
        raise ValueError(
            f"method 'fullgrad' sums bias gradients of Conv2d and BatchNorm2d layers, and a "
            f"{type(model).__name__} has none with a bias: use method='gradcam'"
        )
    if method in _NO_LAYER and len(layers) > 1:
        raise ValueError(
            f"method {method!r} reads the whole network, not a target layer: give one target_layer "
            "(or none), or pick a layer method to fuse several layers"
        )
