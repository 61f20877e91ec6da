"""The read-only part of a style engine that every call shares: the network and how to run it.

Nothing here changes after construction except a thread-safe counter, so any number of threads
can run on one :class:`Runtime`; everything that belongs to one call (plan, hooks, targets, the
image being optimised, the optimiser) is made by that call.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from nstcam._capture import CheckRecord
from nstcam.preprocess import Preprocess
from nstcam.style._owner import Owner
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.vgg import fold_batchnorm, vgg_layers
from nstcam.weights import WeightsInfo

__all__ = ["Counter", "Runtime", "prepare_features"]

T = TypeVar("T")


class Counter:
    """A counter that threads may bump at once."""

    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._value += n

    @property
    def value(self) -> int:
        return self._value


def prepare_features(
    features: nn.Sequential, device: torch.device, *, fold_bn: bool, channels_last: bool
) -> nn.Sequential:
    """A frozen, eval-mode copy of ``features`` on ``device`` (BatchNorm folded if asked).

    The given module is only read: its training flags and parameters stay as they are.
    """
    net = fold_batchnorm(features) if fold_bn else copy.deepcopy(features)
    net.eval().requires_grad_(False)
    net.to(device)
    if channels_last:
        net.to(memory_format=torch.channels_last)
    return net


@dataclass(frozen=True)
class Runtime:
    """The network of a style engine and how to run it.

    Attributes:
        net: the frozen VGG features that run.
        device: where they run.
        amp: bfloat16 autocast on CUDA.
        channels_last: inputs are made channels-last.
        weights: where the weights came from.
        preprocess: how the network takes an RGB image in [0, 1] (ImageNet's mean and std by
            default; a caffe VGG's: BGR, 0-255, less its means).
        compile: run steps through the compiled function (``_compiled.py``).
        style_targets: how many style images' Gram targets were computed (diagnostics).
    """

    net: nn.Sequential
    device: torch.device
    amp: bool
    channels_last: bool
    weights: WeightsInfo
    compile: bool = False
    preprocess: Preprocess = field(default_factory=Preprocess)
    style_targets: Counter = field(default_factory=Counter)
    compiled: dict = field(default_factory=dict)  # layers -> Compiled step, or False (see _compiled.py)
    compiled_shapes: dict = field(default_factory=dict)  # (layers, shapes) -> True (compiled), False (eager)
    shape_failures: dict = field(default_factory=dict)  # (layers, shapes) -> failures of the compiled step
    compile_failures: Counter = field(default_factory=Counter)  # fallbacks to the eager step
    checks: CheckRecord = field(default_factory=CheckRecord)  # the compiled step's self-checks
    torch_fallbacks: Counter = field(default_factory=Counter)  # new keys torch.compile left uncompiled
    graph_skips: Counter = field(default_factory=Counter)  # CUDA graphs torch.compile skipped
    lock: threading.Lock = field(default_factory=threading.Lock)
    owner: Owner = field(default_factory=Owner)  # the thread a compiling engine's calls run on
    balance: dict = field(default_factory=dict)  # layer -> weight factor (_balance.py), measured once

    @property
    def layers(self) -> dict[str, int]:
        """The network's human layer names -> their indices (:func:`~nstcam.style.vgg.vgg_layers`)."""
        return vgg_layers(self.net)

    def planning(self) -> dict[str, Any]:
        """What a plan needs of the network: its layer names and its layer balance."""
        from nstcam.style._balance import layer_balance

        return {"known_layers": self.layers, "balance": layer_balance(self)}

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs one engine call: on the owner thread when compiling (``_owner.py``), else here."""
        if self.compile:
            return self.owner.call(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    def features(self, hooks: VGGFeatureHooks, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Normalises an RGB batch in [0, 1] as the network takes it and reads the hooked layers
        (forward stopped early)."""
        x = self.preprocess.normalize(x)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            return hooks.features(x)
