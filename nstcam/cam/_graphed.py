"""Grad-CAM without launch overhead on CUDA: the whole gradient-CAM pass (forward to the logits,
backward to the target layer, the CAM formula, upsampling) captured once per input shape in a CUDA
graph and replayed.

At batch 1 a ResNet's eager pass is bound by kernel launches, not by the GPU; a replayed graph
launches everything at once. Each captured pass owns static input and output tensors, so a replay
is guarded by a lock and its outputs are cloned before the lock is released: two callers never see
each other's input or maps. Hooks are registered only while capturing; a replay runs none.

The capture itself is injectable (``capture=``): the default needs CUDA; tests on CPU pass an
emulation that re-runs the pass into the same static outputs, which exercises everything here but
the CUDA calls.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from torch import nn

from nstcam.cam._maps import upsample_maps
from nstcam.cam.hooks import CamHooks
from nstcam.cam.methods import GRADIENT_METHODS

__all__ = ["CamGraphs", "Outputs", "cam_pass", "cuda_capture"]

logger = logging.getLogger(__name__)

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""(maps (k, N, H, W), raws (k, N, h, w), probs (N, classes), classes (k, N))."""
Capture = Callable[[Callable[[], Outputs]], tuple[Callable[[], None], Outputs]]


def cam_pass(
    model: nn.Module,
    layer: str,
    method: str,
    x: torch.Tensor,
    classes: Callable[[torch.Tensor], torch.Tensor],
    out_size: tuple[int, int],
) -> Outputs:
    """One gradient-CAM pass: ``classes(logits)`` gives the (k, N) classes to explain. Nothing in it
    synchronises with the host when ``classes`` does not, so it can be captured in a CUDA graph."""
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        logits = model(x)  # grad mode switches on at the target layer
        act = hooks.checked_activation(logits)
        classes = classes(logits)
        probs = logits.detach().float().softmax(1)
        raws = []
        for j in range(classes.shape[0]):
            with torch.enable_grad():
                score = logits.gather(1, classes[j].view(-1, 1)).sum()
                torch.autograd.grad(score, act, retain_graph=j < classes.shape[0] - 1)
            raws.append(torch.relu(GRADIENT_METHODS[method](act.detach().float(), hooks.gradient.float())))
        raw = torch.stack(raws)
        maps = torch.stack([upsample_maps(r, out_size) for r in raws])
    return maps, raw, probs, classes


def cuda_capture(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
    """Warms ``fn`` up on a side stream, captures it in a :class:`torch.cuda.CUDAGraph`, and returns
    the graph's replay and its static outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # cuDNN picks its algorithms and the allocator warms up outside the graph
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph.replay, outputs


@dataclass
class _Captured:
    x: torch.Tensor
    classes: torch.Tensor | None
    replay: Callable[[], None]
    outputs: Outputs


class CamGraphs:
    """Captured passes of one engine, per input shape, dtype, output size and target kind (LRU).

    Args:
        capture: how to capture a pass (default: a CUDA graph).
        max_graphs: captured passes kept; the least recently used is dropped beyond this.
    """

    def __init__(self, capture: Capture | None = None, max_graphs: int = 8) -> None:
        self._capture = capture or cuda_capture
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[Hashable, _Captured | None] = OrderedDict()
        self._lock = threading.Lock()
        self.captures = 0
        self.replays = 0

    def __len__(self) -> int:
        return sum(g is not None for g in self._graphs.values())

    def run(
        self,
        model: nn.Module,
        layer: str,
        method: str,
        x: torch.Tensor,
        classes: torch.Tensor | int,
        out_size: tuple[int, int],
    ) -> Outputs | None:
        """The pass's outputs (fresh tensors) for ``classes``, a (k, N) tensor of class indices or
        an int k for each image's top-k classes; or None when this kind of pass could not be captured
        (the caller then runs it eagerly; a failure is logged once per kind)."""
        given = isinstance(classes, torch.Tensor)
        key = (
            tuple(x.shape), x.dtype, str(x.device), layer, method, tuple(out_size),
            tuple(classes.shape) if given else classes,
        )  # fmt: skip
        with self._lock:
            if key not in self._graphs:
                self._graphs[key] = self._new(key, model, layer, method, x, classes, out_size)
                while len(self._graphs) > self.max_graphs:
                    self._graphs.popitem(last=False)
            self._graphs.move_to_end(key)
            captured = self._graphs[key]
            if captured is None:
                return None
            captured.x.copy_(x)
            if captured.classes is not None:
                captured.classes.copy_(classes)
            captured.replay()
            self.replays += 1
            return tuple(t.clone() for t in captured.outputs)  # type: ignore[return-value]

    def _new(self, key, model, layer, method, x, classes, out_size) -> _Captured | None:
        static_x = x.detach().clone()
        static_classes = classes.clone() if isinstance(classes, torch.Tensor) else None

        def resolve(logits: torch.Tensor) -> torch.Tensor:
            return static_classes if static_classes is not None else logits.topk(classes, dim=1).indices.T

        try:
            replay, outputs = self._capture(
                lambda: cam_pass(model, layer, method, static_x, resolve, out_size)
            )
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to the eager pass
            logger.warning("Grad-CAM graph capture failed for input %s (%s); running eagerly", key[0], e)
            return None
        self.captures += 1
        return _Captured(static_x, static_classes, replay, outputs)
