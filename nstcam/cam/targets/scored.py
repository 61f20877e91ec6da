"""Target objects as a one-column classifier, for the methods whose passes differentiate class
logits: Smooth Grad-CAM++, ShapleyCAM, FullGrad and guided backpropagation (and Guided Grad-CAM).

:func:`scored_model` gives a private :func:`~nstcam.hooks.twin` of the model whose class is a
subclass of the model's own, its ``forward`` the model's followed by the targets: it returns an
(M, 1) tensor, row ``r`` the score of image ``r mod N``'s target (a batch of noisy copies of the N
images scores each copy with its image's target). Explaining its class 0 is explaining the targets,
through each method's own pass; the module names, the hooks the passes put on the copy, and the
copies they make of it (``twin`` keeps the class) are those of the model.

Methods that read more than one class stay with classes: CAM (a class's row of the linear head),
Finer-CAM (the classes nearest the target) and LeGrad (the classifier's head on every block).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from nstcam.cam._maps import model_output
from nstcam.cam.targets.objects import Target
from nstcam.hooks import twin

__all__ = ["scored_model"]


def scored_model(model: nn.Module, targets: Sequence[Target]) -> tuple[nn.Module, list[torch.Tensor]]:
    """(a private copy of ``model`` returning the targets' scores as (M, 1), a list that receives the
    (N,) scores of its first pass: the unchanged images)."""
    net = twin(model)
    net.__class__ = _scored_class(type(model))
    first: list[torch.Tensor] = []
    net.__dict__["_nstcam_targets"] = list(targets)  # plain attributes, shared by the pass's own copies
    net.__dict__["_nstcam_first"] = first
    return net, first


@functools.cache
def _scored_class(base: type) -> type:
    def forward(self: nn.Module, x: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = model_output(base.forward(self, x, *args, **kwargs))
        targets = self.__dict__["_nstcam_targets"]
        m, n = _batch(x), len(targets)
        if m % n:
            raise ValueError(f"a batch of {m} images cannot be scored by {n} targets (one per image)")
        y = torch.stack([targets[r % n](out, r).reshape(()) for r in range(m)]).unsqueeze(1)
        first = self.__dict__["_nstcam_first"]
        if not first:
            first.append(y.detach()[:n, 0].float())
        return y

    return type(f"Scored{base.__name__}", (base,), {"forward": forward, "__module__": __name__})


def _batch(x: Any) -> int:
    return len(x) if isinstance(x, (list, tuple)) else int(x.shape[0])
