"""The gate every request to the app passes before Gradio acts on it: files named by a path must be
uploads to this server, numbers must be within their input's range; a refusal names the argument
and is one line in the log (Gradio's own range errors log a traceback and name no argument)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from nstcam.app.errors import refuse
from nstcam.app.files import upload_path

__all__ = ["guard_requests"]


def guard_requests(demo: gr.Blocks) -> gr.Blocks:
    """Checks every request to ``demo`` where Gradio first sees its values (``validate_inputs``).

    It covers every endpoint, public or not (the browser calls hidden steps, such as the before/after
    slider's, by index), every component, with or without Gradio's ``meta`` field:

    - every server path a value names (``{"path": ...}``, at any depth) must pass
      :func:`nstcam.app.files.upload_path`: a regular file inside Gradio's upload folder;
    - a number sent to a ``Slider`` or ``Number`` with bounds must be within them.
    """
    validate = demo.validate_inputs

    def checked(block_fn: Any, inputs: list[Any]) -> None:
        validate(block_fn, inputs)
        names = _input_names(block_fn.fn, len(block_fn.inputs))
        for block, name, value in zip(block_fn.inputs, names, inputs, strict=False):  # extras unread
            for path in _named_paths(value):
                upload_path(path, f"{type(block).__name__.lower()} ({name})")
            _check_bounds(block, name, value)

    demo.validate_inputs = checked
    return demo


def _named_paths(value: Any) -> Iterator[str]:
    """Every server path a request's value names; URLs are left to Gradio, which fetches public
    addresses only (safehttpx) into its upload folder."""
    if isinstance(value, dict):
        path = value.get("path")
        if isinstance(path, str) and not path.startswith(("http://", "https://")):
            yield path
        for v in value.values():
            yield from _named_paths(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _named_paths(v)


def _check_bounds(block: Any, name: str, value: Any) -> None:
    if not isinstance(block, (gr.Slider, gr.Number)) or isinstance(value, bool):
        return
    lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
    if lo is None and hi is None:
        return
    if not isinstance(value, (int, float)) and value is not None:
        raise refuse(f"{name} must be a number, got {value!r}")
    if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
        span = (
            f"between {lo:g} and {hi:g}"
            if lo is not None and hi is not None
            else (f"at least {lo:g}" if lo is not None else f"at most {hi:g}")
        )
        raise refuse(f"{name} must be {span} on this server, got {value}")


def _input_names(fn: Callable[..., Any] | None, n: int) -> list[str]:
    """The handler's parameter names, as the API calls the inputs."""
    try:
        params = inspect.signature(fn).parameters.items()
        names = [k for k, p in params if p.kind <= p.POSITIONAL_OR_KEYWORD]
    except (TypeError, ValueError):
        names = []
    return (names + ["input"] * n)[:n]
