"""The Grad-CAM engine's hook manager (and, re-exported, the eval-mode view it explains through)."""

from __future__ import annotations

import torch
from torch import nn

from nstcam.hooks import HookManager, eval_view

__all__ = ["CamHooks", "eval_view"]


class CamHooks(HookManager):
    """One layer, cut from the graph so that backward stops there.

    The forward hook records the layer's output as a fresh leaf (``grad_leaf``) and a gradient hook
    on it receives d(score)/d(activation); like every :class:`~nstcam.hooks.HookManager`, it sees
    only its own caller's passes, so several of them may hook one shared network at once.
    """

    def __init__(self, model: nn.Module, layer: str) -> None:
        super().__init__(model, [layer], grad_leaf=True, capture_grads=True)
        self.layer = layer

    @property
    def activation(self) -> torch.Tensor:
        return self.outputs[self.layer]

    @property
    def gradient(self) -> torch.Tensor:
        return self.grads[self.layer]

    def checked_activation(self, logits: torch.Tensor) -> torch.Tensor:
        """The recorded activation, after checking that the pass fits CAM (shape checks only).

        Raises:
            RuntimeError: the layer did not run.
            ValueError: the model's output is not (N, classes) or the layer's is not 3-, 4- or 5-D
                (its layout is read by :mod:`nstcam.layouts`).
        """
        if self.outputs.get(self.layer) is None:
            raise RuntimeError(f"layer {self.layer!r} did not run in the forward pass")
        if logits.ndim != 2:
            raise ValueError(f"the model must return logits of shape (N, classes), got {tuple(logits.shape)}")
        act = self.activation
        if not isinstance(act, torch.Tensor) or act.ndim not in (3, 4, 5):
            raise ValueError(
                f"layer {self.layer!r} outputs {tuple(getattr(act, 'shape', ()))}; CAM reads (N, C, [t,] h, "
                "w), (N, [t,] h, w, C) or (N, tokens, C): choose another layer"
            )
        return act
