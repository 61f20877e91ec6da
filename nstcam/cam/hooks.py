"""The Grad-CAM engine's hook manager, and the eval-mode view that keeps a shared model's flags."""

from __future__ import annotations

import torch
from torch import nn

from nstcam.hooks import HookManager, twin

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


def eval_view(model: nn.Module) -> nn.Module:
    """``model`` itself if every module is in eval mode, else an eval-mode twin sharing its tensors.

    Explaining needs eval mode (BatchNorm's running statistics, no dropout), but flipping a shared
    model's flags for the length of a call would change them under another thread's feet. The twin
    is a tree of shallow copies of the modules: its parameters and buffers *are* the model's (no
    memory, and weights loaded in place later are seen), its hook tables are new and empty, and
    every ``training`` flag is False. Nothing of the model is written, so building a twin is safe
    while other threads run or hook the model.
    """
    if not any(m.training for m in model.modules()):
        return model
    view = twin(model)
    for m in view.modules():
        m.training = False
    return view
