"""One handler, two doors: the page's button shows a refusal in the tab's Status box, the named API
endpoint raises it for the client.

Gradio shows a raised error as a toast and marks every output panel with a red "Error" badge; a
person then reads a message that vanishes and panels that look broken. So the button runs the
handler through :func:`for_people`, which turns a refusal into the Status text and leaves the other
panels as they were, while the endpoint (``api_name``, also the MCP tool) is the same handler on a
trigger no one sees, where the error reaches ``gradio_client`` as before. Both share one queue
(``concurrency_id``), so the page and the API never run more jobs at once than the server allows.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from nstcam.app.guard.inputs import BAD_UPLOAD

__all__ = ["for_people", "listen"]


def listen(
    button: gr.Button,
    fn: Callable[..., Any],
    inputs: Sequence[gr.components.Component],
    outputs: Sequence[gr.components.Component],
    status: gr.components.Component,
    api_name: str,
    done: Callable[..., str] | None = None,
    **kwargs: Any,
) -> Any:
    """Wires ``fn`` to ``button`` for people and to the endpoint ``api_name`` for clients.

    Args:
        button: the tab's run button.
        fn: the handler (a function or a generator function), as the API documents it.
        inputs: its input components.
        outputs: its output components, as the API returns them.
        status: where a person reads the outcome; added to the page's outputs if the API has no
            such output.
        api_name: the endpoint's name.
        done: the Status text after a success, from the call's arguments, where the API returns no
            status of its own.
        kwargs: passed to both listeners (``trigger_mode``...).

    Returns:
        The page's listener (for ``.then``).
    """
    hidden = gr.Button(visible=False, elem_classes=["nst-api-trigger"])
    hidden.click(fn, list(inputs), list(outputs), api_name=api_name, concurrency_id=api_name, **kwargs)
    page_outputs = list(outputs) if status in outputs else [*outputs, status]
    return button.click(
        for_people(
            fn, len(outputs), page_outputs.index(status), status not in outputs, done, reads_status=True
        ),
        [*inputs, status],  # what the Status shows: a bad upload's reason is kept (see for_people)
        page_outputs,
        api_name=False,
        concurrency_id=api_name,
        **kwargs,
    )


def for_people(
    fn: Callable[..., Any],
    n: int,
    at: int,
    adds_status: bool,
    done: Callable[..., str] | None = None,
    reads_status: bool = False,
) -> Callable[..., Any]:
    """``fn`` whose refusals become the Status text (index ``at`` of the outputs) instead of an error;
    ``adds_status``: the status is an extra last output, ``done(*args)`` its text after a success.

    With ``reads_status``, the Status's current text comes as one more input, last: where it says
    why an upload was taken out (:func:`nstcam.app.guard.inputs.warn_bad_uploads`), a run refused for the
    missing file keeps that reason instead of saying "Upload an image."
    """

    def fill(out: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out = out if isinstance(out, tuple) else (out,)
        if not adds_status:
            return out
        if all(o == gr.skip() for o in out):  # a step with nothing to show: no "done" yet, and no
            return (*out, "")  # old warning left under the progress bar
        return (*out, done(*args) if done is not None else "")

    def refused(e: gr.Error, shown: Any) -> tuple[Any, ...]:
        values: list[Any] = [gr.skip()] * (n + adds_status)
        kept = e.message.startswith("Upload ") and str(shown or "").startswith(f"⚠️ {BAD_UPLOAD}")
        values[at] = str(shown) if kept else f"⚠️ {e.message}"  # said again: a first step may clear it
        return tuple(values)

    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in _params(fn))

    def split(args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], Any]:
        if not reads_status:
            return args, None
        if "shown_status" in kw:
            return args, kw.pop("shown_status")
        return (args[:-1], args[-1]) if len(args) > positional else (args, None)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def run_steps(*args: Any, **kw: Any) -> Any:
            args, shown = split(args, kw)
            try:
                for out in fn(*args, **kw):
                    yield fill(out, args)
            except gr.Error as e:
                yield refused(e, shown)

        return _reading_status(run_steps, fn) if reads_status else run_steps

    @functools.wraps(fn)
    def run(*args: Any, **kw: Any) -> Any:
        args, shown = split(args, kw)
        try:
            return fill(fn(*args, **kw), args)
        except gr.Error as e:
            return refused(e, shown)

    return _reading_status(run, fn) if reads_status else run


def _reading_status(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` whose signature is ``fn``'s and one more positional parameter, last (after the
    request and the progress tracker Gradio fills in), for the Status's current text."""
    params = _params(fn)
    last = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    shown = inspect.Parameter("shown_status", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    wrapper.__signature__ = inspect.Signature([*params[:last], shown, *params[last:]])  # type: ignore[attr-defined]
    return wrapper


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())
