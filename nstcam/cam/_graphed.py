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
  allocation or synchronisation does not invalidate the capture, and one process-wide lock
  (``nstcam/_capture.py``, shared with the compiled style step's first calls, and torch's own), so
  two captures never overlap; a capture that finds it held runs that call eagerly instead of waiting.
  A failed capture is retried when the key comes again; after ``max_failures`` failures the key runs
  eagerly for good (logged once).
- **Self-check**: before a new graph serves, its first replay, on an input other than the one
  captured (so a graph that never updates its outputs shows), is compared with the eager pass on
  that input, after a second replay (so an output that a later replay overwrites shows): raw maps
  within :data:`CHECK_TOLERANCE` of their largest value (:data:`TF32_CHECK_TOLERANCE` where the
  convolutions run in TF32), probabilities likewise, classes equal. A
  graph that fails is dropped and its key runs eagerly for good (said once); ``graph_stats`` counts
  the checks, mismatches and the largest error.
- **Foreign hooks**: the capture runs on a hook-free twin of the network (same parameters), so hooks
  that other code keeps on the shared model (another CAM library's ``.cpu()``, a user's probe) never
  run inside a graph nor break its capture.
- **Memory**: all graphs of an engine share one memory pool (replays are serialised, outputs copied),
  a new one once no graph held here references it (torch refuses to capture into a dead pool).
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

from nstcam._capture import (
    CAPTURE_LOCK,
    CheckRecord,
    capture_turn,
    error_of_max,
    raised,
    tf32_in_use,
    torch_capture_lock,
)
from nstcam.cam.hooks import CamHooks
from nstcam.hooks import twin
from nstcam.layouts import detect_layout, input_grid, to_nchw

__all__ = ["CAPTURE_LOCK", "CamGraphs", "Outputs", "cuda_capture", "gradient_pass", "graph_stats"]

logger = logging.getLogger(__name__)

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(raws (k, N, h, w) at the layer's resolution, probs (N, classes), classes (k, N))."""
Replay = Callable[[], None]
MapFormula = Any
"""A gradient method's formula: ``map(A, G, eigen_smooth)`` -> raw maps (N, h, w), hashable."""
Capture = Callable[[Callable[..., Outputs], tuple[torch.Tensor, ...], Any], tuple[Replay, Outputs]]

CHECK_TOLERANCE = 1e-5
"""A new graph's first replay must give each raw map within this fraction of the eager map's
largest value, and the probabilities within this much; the classes equal."""

TF32_CHECK_TOLERANCE = 2e-2
"""The same where convolutions run in TF32 (``nstcam._capture.tf32_in_use``): a graph and the eager
pass may then run other cuDNN algorithms, each exact to a 10-bit mantissa only. Measured: 1.1e-3 on
an H200 (torch 2.11, ResNet-50, a capture under load); simulating TF32 against float32 on a CPU
(ResNet-18, worst of 3 inputs; ``tests/benchmarks/bench_selfcheck.py --tf32``) 2.55e-3 at 64 x 80 and
2.69e-3 at 224 x 336. A graph that serves another input's outputs is off by far more."""


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
    grid = input_grid(x)
    with torch.inference_mode(False), torch.no_grad(), CamHooks(model, layer) as hooks:
        logits = model(x)  # grad mode switches on at the target layer
        act = hooks.checked_activation(logits)
        layout = layout or detect_layout(tuple(act.shape), *grid)
        a = to_nchw(act.detach().float(), layout, *grid)
        classes = classes(logits)
        probs = logits.detach().float().softmax(1)
        raws = []
        for j in range(classes.shape[0]):
            with torch.enable_grad():
                row = classes[j]
                y = score(logits, row) if score is not None else logits.gather(1, row.view(-1, 1))
                torch.autograd.grad(y.sum(), act, retain_graph=j < classes.shape[0] - 1)
            g = to_nchw(hooks.gradient.float(), layout, *grid)  # dropped tokens' gradients ignored
            raws.append(formula.map(a, g, eigen_smooth))
    return torch.stack(raws), probs, classes


def cuda_capture(
    fn: Callable[..., Outputs], inputs: tuple[torch.Tensor, ...], pool: Any
) -> tuple[Callable[[], None], Outputs]:
    """Warms ``fn(*inputs)`` up on a side stream, captures it in a :class:`torch.cuda.CUDAGraph` from
    the shared memory ``pool`` (thread-local error mode), and returns the replay and static outputs."""
    with torch_capture_lock():  # never beside one of torch.compile's recordings (nstcam/_capture.py)
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
        new_pool: makes a memory pool for the graphs (default: ``torch.cuda.graph_pool_handle``,
            for CUDA inputs only; tests pass their own, used on any device).
    """

    def __init__(
        self,
        capture: Capture | None = None,
        max_graphs: int = 8,
        max_failures: int = 3,
        capture_after: int = 2,
        new_pool: Callable[[], Any] | None = None,
    ) -> None:
        self._capture = capture or cuda_capture
        self._new_pool = new_pool
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
        self.checks = CheckRecord()

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
                out = self._replay(captured, x, classes)
            except Exception as e:  # noqa: BLE001 - a replay that fails: this call runs eagerly
                self._drop(key, e)
                return None
            self.replays += 1
            return out

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
        logger.warning("Grad-CAM graph %s failed for input %s (%s); %s", what, key[0], raised(e), then)

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
        out = tuple(t.clone() for t in captured.outputs)  # the next replay overwrites the graph's outputs
        if cuda:
            self._event = torch.cuda.Event()
            self._event.record()
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

        def fn(inp: torch.Tensor) -> Outputs:  # captured; and run eagerly, the self-check's reference
            return gradient_pass(net, layer, formula, inp, resolve, layout)

        with capture_turn(blocking=False) as turn:
            if not turn:  # another thread captures or compiles: this call runs eagerly, no waiting
                logger.debug("Grad-CAM graph capture for input %s deferred: another is under way", key[0])
                return None
            try:
                with torch.inference_mode(False):  # static tensors replayable in any mode
                    replay, outputs = self._capture(fn, (static_x,), self._pool_for(x))
            except Exception as e:  # noqa: BLE001 - a failed capture: this call runs eagerly
                self._failed(key, "capture", e, "will retry")
                return None
            captured = _Captured(static_x, static_classes, replay, outputs)
            if not self._check(key, captured, fn, x, classes):
                return None
        self.captures += 1
        return captured

    def _pool_for(self, x: torch.Tensor) -> Any:
        """The memory pool a new capture shares: the engine's, while a graph held here was captured
        into it; else a new one. torch's allocator refuses to capture into a pool that no living graph
        references (``INTERNAL ASSERT FAILED ... use_count > 0``): on an H200 a first graph that
        failed its self-check was dropped, and the next capture into its pool failed so."""
        if self._new_pool is None and not x.is_cuda:
            return None
        if self._pool is None or not self._graphs:
            self._pool = (self._new_pool or torch.cuda.graph_pool_handle)()
        return self._pool

    def _check(self, key, captured: _Captured, eager: Callable[[torch.Tensor], Outputs], x, classes) -> bool:
        """The new graph's first replay against the eager pass (module docstring); False (and the
        key eager for good, said once) where it differs or raises."""
        other = -x.flip(-1)  # not the captured input: a graph that never updates its outputs shows
        try:
            got = self._replay(captured, other, classes)
            self._replay(captured, x, classes)  # the canary: overwrites the graph's outputs
            want = eager(other)
            error, why = _compare(got, want, check_tolerance(x.device))
        except Exception as e:  # noqa: BLE001 - a graph that raises is not one to serve
            error, why = float("inf"), raised(e)
        self.checks.add(error)
        if not why:
            return True
        self.checks.mismatch()
        self._failures[key] = self.max_failures
        logger.warning(
            "Grad-CAM graph for input %s disagrees with the eager pass (%s); it runs eagerly from now on",
            key[0],
            why,
        )
        return False


def check_tolerance(device: torch.device) -> float:
    """The self-check's tolerance on ``device``: :data:`TF32_CHECK_TOLERANCE` where its convolutions
    run in TF32, else :data:`CHECK_TOLERANCE`."""
    return TF32_CHECK_TOLERANCE if tf32_in_use(device) else CHECK_TOLERANCE


def _compare(got: Outputs, want: Outputs, tolerance: float = CHECK_TOLERANCE) -> tuple[float, str]:
    """The largest relative error of a replay's outputs against eager's, and what is wrong (empty:
    within ``tolerance``, classes equal)."""
    (raws, probs, classes), (raws_e, probs_e, classes_e) = got, want
    if classes.shape != classes_e.shape or not torch.equal(classes.cpu(), classes_e.cpu()):
        return float("inf"), "other classes"
    maps = [error_of_max(g, w) for g, w in zip(raws.flatten(0, 1), raws_e.flatten(0, 1), strict=True)]
    map_error = max(maps, default=0.0)
    prob_error = float((probs.double() - probs_e.double()).abs().max()) if probs.numel() else 0.0
    if not bool(torch.isfinite(probs).all()):
        prob_error = float("inf")
    error = max(map_error, prob_error)
    if map_error > tolerance:
        return error, f"raw maps differ by {map_error:.2e} of their largest value (tolerance {tolerance:g})"
    if prob_error > tolerance:
        return error, f"probabilities differ by {prob_error:.2e} (tolerance {tolerance:g})"
    return error, ""


def graph_stats(graphs: CamGraphs | None) -> dict[str, int | float]:
    """The CUDA-graph path's record: ``captures`` made (and passing their self-check), ``replays``
    served, ``cached`` graphs held, ``failures`` of capture or replay, and the self-check's
    ``checked`` graphs, ``mismatches`` (each key then eager) and ``max_rel_err`` (all 0 where the
    engine runs eagerly: CPU, MPS, ``cuda_graphs=False``)."""
    if graphs is None:
        return {"captures": 0, "replays": 0, "cached": 0, "failures": 0, **CheckRecord().as_dict()}
    return {
        "captures": graphs.captures,
        "replays": graphs.replays,
        "cached": len(graphs),
        "failures": graphs.failures,
        **graphs.checks.as_dict(),
    }
