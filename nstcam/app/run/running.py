"""How a request runs: in a worker thread whose progress streams back, with its errors said in one
line; the API endpoint built from a handler's own signature; the Cancel button."""

from __future__ import annotations

import contextvars
import inspect
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
import torch
from PIL import Image

from nstcam.app.config import RANDOM_HINT
from nstcam.app.errors import refuse, shorten, stopped
from nstcam.app.run.cancels import mark_run
from nstcam.app.run.runs import Runs
from nstcam.cam import StoppedEarly
from nstcam.fast import FastWeightsError
from nstcam.image import ImageError
from nstcam.style import InsufficientMemoryError
from nstcam.weights import WeightsUnavailableError

__all__ = [
    "Result",
    "cancel_on",
    "count",
    "endpoint",
    "fail",
    "halted",
    "in_thread",
    "progress_reporter",
    "said_by",
    "weights_note",
]

logger = logging.getLogger(__name__)


def fail(e: BaseException) -> gr.Error:
    """The error the user sees for ``e``: ordinary mistakes as one log line, real faults with their
    traceback (logged once, here)."""
    if isinstance(e, gr.Error):
        return e
    if isinstance(e, StoppedEarly):
        return stopped(str(e))
    if isinstance(e, FastWeightsError):  # before FileNotFoundError, its base
        return refuse(f"The fast network's weights are missing: {e}")
    if isinstance(e, (ImageError, FileNotFoundError)):
        return refuse(f"Bad image: {e}")
    if isinstance(e, WeightsUnavailableError):
        return refuse(f"Model weights are missing: {e.explain(RANDOM_HINT, show_folder=False)}")
    if isinstance(e, (InsufficientMemoryError, torch.cuda.OutOfMemoryError, MemoryError)):
        return refuse(f"Out of memory: {e}. Try a smaller size.")
    if isinstance(e, ValueError):
        return refuse(str(e))
    logger.exception("unexpected error in a request")
    return gr.Error(shorten(f"Internal error ({type(e).__name__}): {e}"), print_exception=False)


def count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def said_by(stop: threading.Event | None, e: gr.Error) -> gr.Error:
    """``e``, led by the time budget's words where the run's budget ran out (a cancel says itself)."""
    reason = getattr(stop, "reason", None)
    if reason and reason not in e.message:
        return stopped(f"{reason}: {e.message}")
    return e


def halted(stop: threading.Event | None) -> str:
    """How a status calls a run that stopped early: ``cancelled``, or the time budget's words."""
    return getattr(stop, "reason", None) or "cancelled"


def weights_note(random: bool) -> str:
    return " — RANDOM weights: not meaningful" if random else ""


_DONE = object()


def in_thread(fn: Callable[[Callable[[Any], None]], Any], stop: threading.Event) -> Iterator[Any]:
    """Runs ``fn(put)`` in a worker thread and yields whatever it puts; returns what ``fn`` returns.

    If the consumer stops early (Gradio's cancel, a dropped connection), ``stop`` is set and the
    engine stops at its next step, by itself: nothing waits for it here, because Gradio closes a
    cancelled generator on its event loop, where a join would stall every user's requests for the
    rest of the step.
    """
    updates: queue.Queue = queue.Queue()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = fn(updates.put)
        except BaseException as e:  # noqa: BLE001 - handed to the request thread
            outcome["error"] = e
        finally:
            updates.put(_DONE)

    context = contextvars.copy_context()  # the request's (ZeroGPU reads its visitor's token there)
    worker = threading.Thread(target=context.run, args=(work,), name="nstcam-run", daemon=True)
    worker.start()
    try:
        while (item := updates.get()) is not _DONE:
            yield item
    finally:
        stop.set()  # a no-op once the run is done; else it ends at its next step
    worker.join()  # it has put _DONE: returns at once
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def progress_reporter(put: Callable[[Any], None], stop: threading.Event) -> Callable[[Any], bool]:
    """Puts (image so far, "step k/N · loss") at every step the engine reports (each step on a CPU):
    the latest preview image object, the same one until the next preview."""
    last: list[Image.Image | None] = [None]

    def on_step(info: Any) -> bool:
        last[0] = info.preview if info.preview is not None else last[0]
        put((last[0], f"step {info.step}/{info.total_steps} · loss {info.losses['total']:.4g}"))
        return not stop.is_set()

    return on_step


class Result:
    """Iterates a generator and keeps what it returns (``value``)."""

    def __init__(self, gen: Iterator[Any]) -> None:
        self._gen = gen
        self.value: Any = None

    def __iter__(self) -> Iterator[Any]:
        self.value = yield from self._gen


_INTERNAL = ("models", "stop", "progress", "preview_every")
"""A handler's parameters that are the server's, not the API's."""


def endpoint(
    handler: Callable[..., Any], doc: str, *, runs: tuple[Runs, str] | None = None, progress: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Makes the decorated ``body(stop, **params)`` an API endpoint with ``handler``'s parameters
    (names, defaults and types, less the server's own: :data:`_INTERNAL`), then ``progress`` (Gradio's
    progress tracker, when asked) and the request; ``doc`` is its docstring (what the API and MCP
    describe). With ``runs`` (the runs and the kind of run), each call is a run of its session that
    Cancel stops: ``stop`` is set then, or when the request goes away; else ``stop`` is None.
    """
    params = [
        p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for name, p in inspect.signature(handler, eval_str=True).parameters.items()
        if name not in _INTERNAL
    ]
    if progress:
        params.append(
            inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress())
        )
    request = inspect.Parameter(
        "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request
    )
    sig = inspect.Signature([*params, request])

    def wrap(body: Callable[..., Any]) -> Callable[..., Any]:
        def arguments(args: tuple, kwargs: dict) -> tuple[dict[str, Any], Any]:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
            return values, values.pop("request")

        if inspect.isgeneratorfunction(body):

            def api(*args: Any, **kwargs: Any) -> Iterator[Any]:
                values, req = arguments(args, kwargs)
                stop = runs[0].start(runs[1], req) if runs else None
                try:
                    yield from body(stop, **values)
                except gr.Error as e:
                    raise said_by(stop, e) from None
                finally:
                    if runs:
                        runs[0].finish(runs[1], req, stop)

        else:

            def api(*args: Any, **kwargs: Any) -> Any:
                values, _ = arguments(args, kwargs)
                return body(None, **values)

        api.__signature__ = sig  # type: ignore[attr-defined]
        api.__annotations__ = {
            p.name: p.annotation for p in sig.parameters.values() if p.annotation is not p.empty
        }
        api.__name__ = api.__qualname__ = body.__name__
        api.__doc__ = doc
        return mark_run(api, *runs) if runs else api

    return wrap


def cancel_on(button: gr.Button, runs: Runs, kind: str) -> None:
    """The tab's Cancel button stops its session's run of ``kind`` (the engine stops at its next step)."""

    def cancel_run(request: gr.Request) -> None:
        runs.cancel(kind, request)

    button.click(cancel_run, None, None, api_name=False, concurrency_limit=None)
