"""A request's work on a borrowed GPU (Hugging Face ZeroGPU), and the same work in a thread elsewhere.

ZeroGPU runs a ``@spaces.GPU`` function in a worker process forked from the server (one per GPU it
hands out, reused while idle), pickles the function's arguments and results across, charges the
visitor's daily quota by the duration the call asks for, and takes the visitor's ``X-IP-Token``
from the Gradio request of the thread that calls it. The app's first design broke each of those:
every job hung (a closure decorated per call wrote its results into the parent's copies of a queue),
each call forked a worker never reused, the job ran in a thread without the request, nothing was
decorated at import (no start-up report: ZeroGPU stops such a Space), an engine passed as an
argument failed to pickle, and every call asked for 120 s. Here:

- A request's work on a network is a *task*: a module-level function
  ``fn(models, put, stop, **kwargs) -> result`` registered with :func:`task` at import, whose
  keyword arguments and result pickle (images, arrays, options, paths, numbers). It reaches the
  networks through ``models``, the server's :class:`~nstcam.app.config.Models`, loaded on the main
  thread at start (:func:`serve`) and inherited by the forked worker; ``put`` sends a preview or a
  progress item back; ``stop`` is set by Cancel, a closed page or the time budget.
- One function, :func:`on_gpu`, is decorated with ``spaces.GPU`` at import: the start-up report
  names it, and its worker serves every task, reused between calls. It is a generator: what the
  task puts comes back as it is put, then the result (or the error).
- :func:`call` is how a handler runs a task, in its request's context (a worker thread of
  :func:`~nstcam.app.run.running.in_thread` carries it): on ZeroGPU through :func:`on_gpu`;
  elsewhere (a CPU, a GPU of the server's own) right there, as before.
- ``stop`` reaches the worker through a flag in memory mapped before any fork (:data:`_FLAGS`, one
  slot per run), so a cancelled task ends at its next step with its partial result, as in a thread.
- The duration asked is the request's own cost (:func:`gpu_seconds`), never a fixed 120 s.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

from nstcam._device import on_zerogpu
from nstcam.app.run.running import Result, in_thread

__all__ = [
    "ONE_PASS_SECONDS",
    "TASKS",
    "ZEROGPU_START_SECONDS",
    "answered_by",
    "call",
    "gpu_seconds",
    "on_gpu",
    "portable",
    "reporting",
    "serve",
    "task",
]

logger = logging.getLogger(__name__)

TASKS: dict[str, Callable[..., Any]] = {}
"""The tasks by name (``module.function``), registered at import."""

ZEROGPU_START_SECONDS = 10.0
"""Seconds a ZeroGPU call asks for besides its work: the worker's start (fork, CUDA, the networks
moved to the GPU) on its first call. An allowance, not a measurement: no ZeroGPU was at hand."""

ONE_PASS_SECONDS = ZEROGPU_START_SECONDS + 5.0
"""What a call of one forward pass asks for (a feature map, the fast network's painting, a webcam
frame): the start allowance and a few seconds."""

_MODELS: list[Any] = [None]
_SLOTS = 256
_FLAGS = multiprocessing.RawArray("b", _SLOTS)
"""One stop flag per run in progress, in memory shared with every worker forked after import."""
_free = list(range(_SLOTS))
_free_lock = threading.Lock()


def task(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Registers a module-level ``fn(models, put, stop, **kwargs)`` as a task; returns it."""
    TASKS[f"{fn.__module__}.{fn.__qualname__}"] = fn
    return fn


def serve(models: Any) -> None:
    """The server's networks, for the tasks (call it on the main thread at start, before any
    request: a ZeroGPU worker forked later inherits them)."""
    _MODELS[0] = models


def gpu_seconds(cost: Any, config: Any) -> float:
    """The GPU time a ZeroGPU call asks for: :data:`ZEROGPU_START_SECONDS`, plus the server's
    per-request time budget (``config.max_request_seconds``) in the share that the request's
    ``cost`` (:class:`~nstcam.app.guard.cost.Cost`: pixel-steps, masked images, frames...) takes of
    the largest the server admits, at most the budget. On a GPU server's caps (2048 px x 1000 steps,
    300 s) a 512 px x 100-step style request asks for 12 s, a Grad-CAM of one photo about 10 s."""
    budget = float(config.max_request_seconds)
    share = min(1.0, max(0.0, float(cost.units) / float(cost.limit))) if cost.limit else 1.0
    return min(budget, ZEROGPU_START_SECONDS + budget * share)


class _SharedStop:
    """A run's stop in the worker: its slot of :data:`_FLAGS` (set by the server's thread), or set
    here (the run is over: never written back, since the slot may be another run's by then)."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self._here = False

    def is_set(self) -> bool:
        return self._here or bool(_FLAGS[self.slot])

    def set(self) -> None:
        self._here = True


def _asked(name: str, kwargs: dict[str, Any], slot: int, seconds: float) -> float:
    return seconds


def on_gpu(name: str, kwargs: dict[str, Any], slot: int, seconds: float) -> Iterator[tuple[str, Any]]:
    """Runs the task ``name`` (on ZeroGPU: in its forked worker) and yields ``("put", item)`` for
    each item it puts, then ``("value", result)`` or ``("error", exception)``. ``seconds`` is the
    duration asked of ZeroGPU."""
    stop = _SharedStop(slot)
    fn = TASKS[name]
    out = Result(in_thread(lambda put: fn(_MODELS[0], put, stop, **kwargs), stop))  # type: ignore[arg-type]
    try:
        for item in out:
            yield "put", portable(item)
    except Exception as e:  # noqa: BLE001 - sent to the request's thread, which says it
        yield "error", _picklable(e)
        return
    yield "value", portable(out.value)


def portable(value: Any) -> Any:
    """``value`` with every tensor in it on the CPU (at any depth of lists, tuples, dicts and
    dataclasses): what the server's process, which has no GPU of its own on ZeroGPU, can read."""
    import dataclasses

    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.device.type != "cpu" else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(portable(v) for v in value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {f.name: portable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changed)
    return value


def _picklable(e: BaseException) -> BaseException:
    """``e``, or where it does not pickle (an exception with required fields of its own) a
    ``RuntimeError`` with its type and message."""
    try:
        pickle.loads(pickle.dumps(e))  # noqa: S301 - our own exception, round-tripped here
    except Exception:  # noqa: BLE001 - any failure to round-trip
        return RuntimeError(f"{type(e).__name__}: {e}")
    return e


try:  # decorated at import: ZeroGPU's start-up report names it, and its worker is reused
    import spaces  # type: ignore[import-not-found]

    _ON_GPU = spaces.GPU(duration=_asked)(on_gpu)
except ImportError:  # pragma: no cover - depends on the environment
    _ON_GPU = on_gpu


def _take_slot() -> int:
    with _free_lock:
        if not _free:
            raise RuntimeError(f"this server runs at most {_SLOTS} GPU tasks at once")
        slot = _free.pop()
    _FLAGS[slot] = 0
    return slot


def _give_slot(slot: int) -> None:
    with _free_lock:
        _free.append(slot)


def _mirror(stop: threading.Event, slot: int, done: threading.Event) -> None:
    """Sets the run's shared flag once ``stop`` is set (Cancel, a closed page, the time budget)."""
    while not done.is_set():
        if stop.wait(0.05):
            _FLAGS[slot] = 1
            return


def call(
    fn: Callable[..., Any],
    models: Any,
    stop: threading.Event,
    seconds: float,
    on_put: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Runs the task ``fn`` (registered with :func:`task`) with ``kwargs`` and returns its result
    (raises its error); what it puts is handed to ``on_put``. On ZeroGPU in its worker through
    :func:`on_gpu`, asking for ``seconds``, with the request of this thread's context (its
    visitor's token); elsewhere right here, on ``models``."""
    on_put = on_put or (lambda _: None)
    if not on_zerogpu():
        return fn(models, on_put, stop, **kwargs)
    slot, done = _take_slot(), threading.Event()
    threading.Thread(target=_mirror, args=(stop, slot, done), name="nstcam-stop", daemon=True).start()
    gen = _ON_GPU(_name(fn), kwargs, slot, seconds)
    try:
        for kind, item in gen:
            if kind == "put":
                on_put(item)
            elif kind == "error":
                raise item
            else:
                return item
        raise RuntimeError("the GPU task ended without a result")
    finally:
        _FLAGS[slot] = 1  # a call left early stops at its next step
        gen.close()
        done.set()
        _give_slot(slot)


def reporting(put: Callable[[Any], Any], stop: Any) -> Callable[[int, int], bool]:
    """An engine's ``progress(done, total)`` inside a task: puts ``(done, total)`` and answers
    whether to go on (False once ``stop`` is set: the engine ends after its current window)."""

    def report(done: int, total: int) -> bool:
        put((done, total))
        return not stop.is_set()

    return report


def answered_by(
    progress: Callable[[int, int], Any] | None, stop: threading.Event
) -> Callable[[Any], None] | None:
    """``on_put`` for a task that puts ``(done, total)``: hands them to ``progress`` (a handler's
    ``progress(done, total)``), and sets ``stop`` where it answers False (its run is to end)."""
    if progress is None:
        return None

    def told(done_total: tuple[int, int]) -> None:
        if progress(*done_total) is False:
            stop.set()

    return told


def _name(fn: Callable[..., Any]) -> str:
    name = f"{fn.__module__}.{fn.__qualname__}"
    if TASKS.get(name) is not fn:
        raise ValueError(f"{name} is not a task: register it with nstcam.app.run.zerogpu.task")
    return name
