"""Grad-CAM without launch overhead on CUDA: the gradient pass (forward to the logits, backward to the
target layer, the CAM formula) captured in a CUDA graph per input shape and replayed.

At batch 1 a ResNet's eager pass is bound by kernel launches, not by the GPU; a replayed graph
launches everything at once. What makes it right for a server with a thread per request:

- **What is captured**: the pass ends at the raw maps (the layer's resolution), the probabilities and
  the classes, at the network's input size. Upsampling to the photo's own size runs eagerly after the
  replay, so photos of any size that the engine resizes to one input shape share one graph.
- **When**: a key (input shape, dtype, device, layer, method, kind of target) is captured the second
  time it is seen; one-off shapes run eagerly and never pay for a capture.
- **Capture while other threads run**: ``capture_error_mode="thread_local"``, so another thread's
  allocation or synchronisation does not invalidate the capture, and one process-wide lock, so two
  captures never overlap. A failed capture is retried when the key comes again; after
  ``max_failures`` failures the key runs eagerly for good (logged once).
- **Foreign hooks**: the capture runs on a hook-free twin of the network (same parameters), so hooks
  that other code keeps on the shared model (another CAM library's ``.cpu()``, a user's probe) never
  run inside a graph nor break its capture.
- **Memory**: all graphs of an engine share one memory pool (replays are serialised, outputs copied).
- **Replays**: under the engine's lock; each replay waits on an event recorded after the previous one,
  so callers on different CUDA streams are ordered too; outputs are cloned before the lock is released.

The capture itself is injectable (``capture=``): the default needs CUDA; tests on CPU pass one that
traces the pass once and replays the trace (``tests/test_cam_graphs.py``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nstcam.cam.hooks import CamHooks
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, to_nchw

__all__ = ["CAPTURE_LOCK", "CamGraphs", "Outputs", "cuda_capture", "gradient_pass", "graph_stats"]

logger = logging.getLogger(__name__)

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(raws (k, N, h, w) at the layer's resolution, probs (N, classes), classes (k, N))."""
Replay = Callable[[], None]
MapFormula = Any
"""A gradient method's formula: ``map(A, G, eigen_smooth)`` -> raw maps (N, h, w), hashable."""
Capture = Callable[[Callable[..., Outputs], tuple[torch.Tensor, ...], Any], tuple[Replay, Outputs]]

CAPTURE_LOCK = threading.Lock()
"""One capture at a time in the process (CUDA graph captures do not nest across threads)."""


def gradient_pass(
    model: nn.Module,
    layer: str,
    formula: MapFormula,
    x: torch.Tensor,
    classes: Callable[[torch.Tensor], torch.Tensor],
    layout: str | None = None,
    *,
    eigen_smooth: bool = False,
    score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> Outputs:
    """One gradient-CAM pass of ``formula`` (its ``map(A, G, eigen_smooth)``, see
    :class:`nstcam.cam.methods.gradient.Formula`): ``classes(logits)`` gives the (k, N) classes to
    explain; the layer's activation and gradients are read as (N, C, h, w) in ``layout`` (None: from
    the shape, see :mod:`nstcam.layouts`). ``score(logits, classes_row)`` gives the (N,) scores differentiated
    (default: the classes' logits; Finer-CAM's contrast). Nothing in it synchronises with the host
    when ``classes`` does not, so it can be captured in a CUDA graph."""
    in_h, in_w = x.shape[-2:]
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        logits = model(x)  # grad mode switches on at the target layer
        act = hooks.checked_activation(logits)
        layout = layout or detect_layout(tuple(act.shape), in_h, in_w)
        a = to_nchw(act.detach().float(), layout, in_h, in_w)
        classes = classes(logits)
        probs = logits.detach().float().softmax(1)
        raws = []
        for j in range(classes.shape[0]):
            with torch.enable_grad():
                row = classes[j]
                y = score(logits, row) if score is not None else logits.gather(1, row.view(-1, 1))
                torch.autograd.grad(y.sum(), act, retain_graph=j < classes.shape[0] - 1)
            g = to_nchw(hooks.gradient.float(), layout, in_h, in_w)  # dropped tokens' gradients ignored
            raws.append(formula.map(a, g, eigen_smooth))
    return torch.stack(raws), probs, classes


def cuda_capture(
    fn: Callable[..., Outputs], inputs: tuple[torch.Tensor, ...], pool: Any
) -> tuple[Callable[[], None], Outputs]:
    """Warms ``fn(*inputs)`` up on a side stream, captures it in a :class:`torch.cuda.CUDAGraph` from
    the shared memory ``pool`` (thread-local error mode), and returns the replay and static outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # cuDNN picks its algorithms and the allocator warms up outside the graph
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        outputs = fn(*inputs)
    return graph.replay, outputs


@dataclass
class _Captured:
    x: torch.Tensor
    classes: torch.Tensor | None
    replay: Replay
    outputs: Outputs


class CamGraphs:
    """Captured passes of one engine (LRU), as the module docstring describes.

    Args:
        capture: how to capture a pass (default: a CUDA graph).
        max_graphs: captured passes kept; the least recently used is dropped beyond this.
        max_failures: failed captures of a key before it runs eagerly for good.
        capture_after: times a key must be seen before it is captured (2: the second call).
    """

    def __init__(
        self,
        capture: Capture | None = None,
        max_graphs: int = 8,
        max_failures: int = 3,
        capture_after: int = 2,
    ) -> None:
        self._capture = capture or cuda_capture
        self.max_graphs = max_graphs
        self.max_failures = max_failures
        self.capture_after = capture_after
        self._graphs: OrderedDict[Hashable, _Captured] = OrderedDict()
        self._seen: OrderedDict[Hashable, int] = OrderedDict()  # calls per key not captured yet
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._pool: Any = None
        self._event: Any = None
        self._twins: dict[int, nn.Module] = {}
        self.captures = 0
        self.replays = 0
        self.failures = 0

    def __len__(self) -> int:
        return len(self._graphs)

    def run(
        self,
        model: nn.Module,
        layer: str,
        formula: MapFormula,
        x: torch.Tensor,
        classes: torch.Tensor | int,
        layout: str | None = None,
    ) -> Outputs | None:
        """The pass's outputs (fresh tensors) for ``classes``, a (k, N) tensor of class indices or
        an int k for each image's top-k classes; None where this call runs eagerly (a key not seen
        often enough yet, or one whose captures keep failing)."""
        given = isinstance(classes, torch.Tensor)
        wanted = ("given", tuple(classes.shape)) if given else ("top", classes)
        key = (tuple(x.shape), x.dtype, str(x.device), layer, formula, layout, wanted)
        with self._lock:
            captured = self._graphs.get(key)
            if captured is None:
                captured = self._maybe_capture(key, model, layer, formula, x, classes, layout)
                if captured is None:
                    return None
            self._graphs.move_to_end(key)
            try:
                return self._replay(captured, x, classes)
            except Exception as e:  # noqa: BLE001 - a replay that fails: this call runs eagerly
                self._drop(key, e)
                return None

    def _drop(self, key: Hashable, e: BaseException) -> None:
        """A failed replay: the key's graph is dropped, to be captured again when it comes back."""
        self._graphs.pop(key, None)
        self._seen[key] = self.capture_after - 1
        self._failed(key, "replay", e, "will recapture")

    def _failed(self, key: Hashable, what: str, e: BaseException, retry: str) -> None:
        """Counts a failed capture or replay of ``key`` (after ``max_failures`` it runs eagerly for
        good) and says so, once per failure."""
        n = self._failures[key] = self._failures.get(key, 0) + 1
        self.failures += 1
        then = (
            "this shape runs eagerly from now on" if n >= self.max_failures else f"running eagerly, {retry}"
        )
        why = f"{type(e).__name__}: {e}"
        logger.warning("Grad-CAM graph %s failed for input %s (%s); %s", what, key[0], why, then)

    def _maybe_capture(self, key, model, layer, formula, x, classes, layout) -> _Captured | None:
        if self._failures.get(key, 0) >= self.max_failures:
            return None
        seen = self._seen.pop(key, 0) + 1
        if seen < self.capture_after:
            self._seen[key] = seen
            while len(self._seen) > 256:
                self._seen.popitem(last=False)
            return None
        captured = self._new(key, model, layer, formula, x, classes, layout)
        if captured is None:
            self._seen[key] = seen  # retried when the key comes again
            return None
        self._graphs[key] = captured
        while len(self._graphs) > self.max_graphs:
            dropped, _ = self._graphs.popitem(last=False)
            self._seen[dropped] = self.capture_after - 1  # it recurred: recaptured when it comes back
        return captured

    def _replay(self, captured: _Captured, x: torch.Tensor, classes: torch.Tensor | int) -> Outputs:
        cuda = x.is_cuda
        if cuda and self._event is not None:
            torch.cuda.current_stream(x.device).wait_event(self._event)
        captured.x.copy_(x)
        if captured.classes is not None:
            captured.classes.copy_(classes)
        captured.replay()
        out = tuple(t.clone() for t in captured.outputs)
        if cuda:
            self._event = torch.cuda.Event()
            self._event.record()
        self.replays += 1
        return out  # type: ignore[return-value]

    def _twin(self, model: nn.Module) -> nn.Module:
        """A hook-free twin of ``model`` (cached per model object): foreign hooks stay out of graphs."""
        t = self._twins.get(id(model))
        if t is None:
            t = self._twins[id(model)] = twin(model)
        return t

    def _new(self, key, model, layer, formula, x, classes, layout) -> _Captured | None:
        with torch.inference_mode(False):  # a key first met inside inference mode still replays outside it
            static_x = x.detach().clone()
            static_classes = classes.clone() if isinstance(classes, torch.Tensor) else None
        net = self._twin(model)

        def resolve(logits: torch.Tensor) -> torch.Tensor:
            return static_classes if static_classes is not None else logits.topk(classes, dim=1).indices.T

        def fn(inp: torch.Tensor) -> Outputs:
            return gradient_pass(net, layer, formula, inp, resolve, layout)

        try:
            with CAPTURE_LOCK, torch.inference_mode(False):  # static tensors replayable in any mode
                if self._pool is None and x.is_cuda:
                    self._pool = torch.cuda.graph_pool_handle()
                replay, outputs = self._capture(fn, (static_x,), self._pool)
        except Exception as e:  # noqa: BLE001 - a failed capture: this call runs eagerly
            self._failed(key, "capture", e, "will retry")
            return None
        self.captures += 1
        return _Captured(static_x, static_classes, replay, outputs)


def graph_stats(graphs: CamGraphs | None) -> dict[str, int]:
    """The CUDA-graph path's record: ``captures`` made, ``replays`` served, ``cached`` graphs held,
    ``failures`` of capture (all 0 where the engine runs eagerly: CPU, MPS, ``cuda_graphs=False``)."""
    if graphs is None:
        return {"captures": 0, "replays": 0, "cached": 0, "failures": 0}
    return {
        "captures": graphs.captures,
        "replays": graphs.replays,
        "cached": len(graphs),
        "failures": graphs.failures,
    }
