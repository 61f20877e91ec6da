"""The engine's settings checked before any work: the method's options and the target layers."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from nstcam._checks import finite, whole
from nstcam._choices import one_of
from nstcam.cam._smooth import FUSIONS
from nstcam.cam.kinds import model_kind
from nstcam.cam.layers import check_layer, reading
from nstcam.cam.registry import method

__all__ = ["method_options", "read_layers"]


def method_options(
    name: str, fuse: str, n_samples: int | None, std: float | None, seed: int
) -> tuple[str, int | None, float | None, int]:
    """The method and its options checked: (fuse, n_samples, std, seed)."""
    method(name)  # an unknown method refused, listing the known ones
    one_of("fuse", fuse, FUSIONS)
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
