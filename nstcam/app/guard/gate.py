"""The gate every request to the app passes before Gradio acts on it: files named by a path must be
uploads to this server and of the input's kind, numbers finite and within their input's range,
texts and lists within :mod:`nstcam.app.guard.limits`; a refusal names the argument and the limit, quotes
at most :data:`~nstcam.app.guard.limits.MAX_ECHO` characters of the value, and is one line in the log
(Gradio's own errors log a traceback, dump pydantic's report and name no argument)."""

from __future__ import annotations

import inspect
import ipaddress
import math
import socket
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import gradio as gr
from gradio.data_classes import FileData
from pydantic import ValidationError

import nstcam.app.gradio_internals as gradio_internals
from nstcam._choices import choice_error
from nstcam.app.errors import refuse
from nstcam.app.guard.inputs import upload_path
from nstcam.app.guard.limits import MAX_DEPTH, MAX_INT, MAX_ITEMS, MAX_PATH, MAX_TEXT, shown
from nstcam.app.guard.streams import MAX_FRAME_CHARS

__all__ = ["guard_requests", "input_names"]


def guard_requests(demo: gr.Blocks) -> gr.Blocks:
    """Checks every request to ``demo`` where Gradio first sees its values (``validate_inputs``).

    It covers every endpoint, public or not (the browser calls hidden steps, such as the before/after
    slider's, by index), every component, with or without Gradio's ``meta`` field:

    - as many values as the endpoint has inputs (Gradio's own error quotes every component and
      value, upload paths included);
    - every text at most :data:`MAX_TEXT` characters (paths :data:`MAX_PATH`), no NUL character;
      every list at most :data:`MAX_ITEMS` items; every number finite (JSON's ``1e999`` is infinity);
    - a file input's value must be a file (not a text or a number where an image belongs);
    - every server path a value names (``{"path": ...}``, at any depth) must pass
      :func:`nstcam.app.guard.inputs.upload_path`: a regular file inside Gradio's upload folder;
    - a number sent to a ``Slider`` or ``Number`` with bounds must be within them;
    - a ``Checkbox`` takes true or false only (``"false"`` is refused, not read as true).
    """
    gradio_internals.install(demo, "validate_inputs", _checking)
    return demo


def _checking(validate: Callable[[Any, list[Any]], None]) -> Callable[[Any, list[Any]], None]:
    """Gradio's ``validate_inputs`` behind :func:`guard_requests`' checks."""

    def checked(block_fn: Any, inputs: list[Any]) -> None:
        names = input_names(block_fn.fn, len(block_fn.inputs))
        if len(inputs) < len(names):  # Gradio's own words hold every component's repr and the values
            raise refuse(
                f"this endpoint takes {len(names)} values ({', '.join(names)}), got {len(inputs)}; "
                "send one per input, in that order"
            )
        for block, name, value in zip(block_fn.inputs, names, inputs, strict=False):  # extras unread
            _check_huge(block, name, value)
            _check_contents(name, value)
        for k, block in enumerate(block_fn.inputs[: len(inputs)]):
            if _takes_several(block) and isinstance(inputs[k], dict):
                inputs[k] = [inputs[k]]  # one file sent to a list of files: a list of one
        validate(block_fn, inputs)
        for block, name, value in zip(block_fn.inputs, names, inputs, strict=False):
            for url in _named_urls(value):
                _check_url(url, name)
            for path in _named_paths(value):
                upload_path(path, f"{type(block).__name__.lower()} ({name})")
            _check_file_value(block, name, value)
            _check_bounds(block, name, value)
            _check_choice(block, name, value)
            _check_flag(block, name, value)

    return checked


_PATH_KEYS = ("path", "url", "orig_name")


def _check_contents(name: str, value: Any, key: str = "", depth: int = 0) -> None:
    """Texts, lists and numbers at any depth of a request's value, before anything reads them."""
    if depth > MAX_DEPTH:
        raise refuse(f"{name} may be nested at most {MAX_DEPTH} levels deep on this server")
    if isinstance(value, str):
        cap = MAX_PATH if key in _PATH_KEYS else MAX_TEXT
        if key == "url" and value.startswith("data:image/"):
            cap = MAX_FRAME_CHARS  # a webcam frame: its header is checked before decoding (SafeFrame)
        path = key in _PATH_KEYS  # a path is never echoed
        if "\x00" in value:
            raise refuse(f"{name} must not hold a NUL character" + ("" if path else f", got {shown(value)}"))
        if len(value) > cap:
            got = f"{len(value):,} characters" if path else shown(value)
            raise refuse(f"{name} may be at most {cap} characters on this server, got {got}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise refuse(f"{name} must be a finite number, got {value}")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise refuse(
            f"{name} must be between {-MAX_INT} and {MAX_INT}, got a number of {len(str(value))} digits"
        )
    elif isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            raise refuse(f"{name} may hold at most {MAX_ITEMS} fields on this server, got {len(value)}")
        for k, v in value.items():
            _check_contents(name, str(k), depth=depth + 1)  # a key is a text too
            _check_contents(name, v, str(k), depth + 1)
    elif isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS:
            raise refuse(f"{name} may hold at most {MAX_ITEMS} items on this server, got {len(value)}")
        for v in value:
            _check_contents(name, v, key, depth + 1)


_FILE_HINT = "send the file itself (the browser's upload box, or gradio_client's handle_file(path))"


def _check_file_value(block: Any, name: str, value: Any) -> None:
    """A file input's value must be what Gradio reads as one: a file (``{"path": ..., "meta":
    {"_type": "gradio.FileData"}}``), or an image editor's files; else one line, not pydantic's
    report."""
    model = getattr(block, "data_model", None)
    if value is None or model is None or not _is_file_input(block):
        return
    if _takes_several(block):  # a list of files (a single file is read as a list of one)
        items = value if isinstance(value, list) else [value]
        for k, item in enumerate(items, 1):
            _check_one_file(FileData, f"{name} (file {k})", item)
        return
    _check_one_file(model, name, value)


def _takes_several(block: Any) -> bool:
    return isinstance(block, gr.File) and getattr(block, "file_count", "single") != "single"


def _check_one_file(model: Any, name: str, value: Any) -> None:
    if not isinstance(value, dict):  # never echoes a path: a file value is named by its kind only
        got = "a list" if isinstance(value, list) else shown(value)
        raise refuse(f"{name} must be an uploaded file, got {got}: {_FILE_HINT}")
    try:
        model.model_validate(value, context={"validate_meta": True})
    except (ValidationError, ValueError, TypeError) as e:
        where = _first_field(e)
        raise refuse(f"{name} is not a file value Gradio reads{where}: {_FILE_HINT}") from None


def _is_file_input(block: Any) -> bool:
    return isinstance(block, (gr.Image, gr.Video, gr.ImageEditor, gr.File, gr.Audio, gr.Gallery, gr.Model3D))


def _first_field(e: Exception) -> str:
    if not isinstance(e, ValidationError) or not e.errors():
        return ""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "root")
    return f" ({loc + ': ' if loc else ''}{err.get('msg', 'invalid')})"


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


def _named_urls(value: Any) -> Iterator[str]:
    """Every http(s) URL a request's value names as a file's ``path`` (what Gradio fetches; a file's
    ``url`` field is where this server serves it, a loopback address for a page opened locally)."""
    if isinstance(value, dict):
        v = value.get("path")
        if isinstance(v, str) and v.startswith(("http://", "https://")):
            yield v
        for v in value.values():
            if isinstance(v, (dict, list, tuple)):
                yield from _named_urls(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _named_urls(v)


def _check_url(url: str, name: str) -> None:
    """A URL to fetch must name a public host, in every spelling: ``localhost``, and loopback,
    private, link-local or reserved addresses written in dotted, short (``127.1``), decimal
    (``2130706433``), hex (``0x7f000001``) or octal form, and a name that resolves to one, are
    refused here in one line; so is a name that does not resolve (Gradio's fetcher refuses them all
    too, with a traceback in the log per request)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    addresses = _addresses(host)
    if addresses is None:
        raise refuse(
            f"{name} names a URL whose host cannot be resolved; send a public URL or the file itself"
        )
    if not addresses or any(not a.is_global for a in addresses):
        raise refuse(
            f"{name} names a URL of a local or private address; send a public URL or the file itself"
        )


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address] | None:
    """Every address ``host`` stands for, read as the C library reads it (``inet_aton``: short,
    decimal, hex and octal forms), else resolved; [] for a local name, None where it does not
    resolve."""
    if host in ("", "localhost") or host.endswith((".localhost", ".local", ".internal")):
        return []
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        return [ipaddress.IPv4Address(socket.inet_aton(host))]
    except OSError:
        pass
    try:
        found = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return None
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in found]


def _span(block: Any) -> str:
    """The range of numbers an input takes, in words (its own bounds; JSON's any-length integers
    held to :data:`MAX_INT`)."""
    lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
    lo = -MAX_INT if lo is None else max(lo, -MAX_INT)
    hi = MAX_INT if hi is None else min(hi, MAX_INT)
    return (
        f"between {lo:g} and {hi:g}" if max(abs(lo), abs(hi)) < 1e15 else f"between {int(lo)} and {int(hi)}"
    )


def _check_huge(block: Any, name: str, value: Any) -> None:
    """A whole number past :data:`MAX_INT` (``size=10**30``, ``seed=2**70``): refused with the range
    of the input it was sent to, its length said rather than its digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        where = " on this server" if isinstance(block, (gr.Slider, gr.Number)) else ""
        raise refuse(f"{name} must be {_span(block)}{where}, got a number of {len(str(abs(value)))} digits")


def _check_bounds(block: Any, name: str, value: Any) -> None:
    if not isinstance(block, (gr.Slider, gr.Number)) or isinstance(value, bool):
        return
    if not isinstance(value, (int, float)) and value is not None:
        raise refuse(f"{name} must be a number, got {shown(value)}")
    if value is None and isinstance(block, gr.Number) and block.value is None:
        return  # an optional number left empty (the style weight: from the strength)
    if value is not None and _whole(block) and value != int(value):
        raise refuse(f"{name} must be a whole number, got {value:g}")
    lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
    if lo is None and hi is None:
        return
    if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise refuse(f"{name} must be {_span(block)} on this server, got {value}")


def _whole(block: Any) -> bool:
    """The input counts something: a ``Number`` of precision 0, a ``Slider`` stepping by 1 from a
    whole minimum (steps, top-k, channels...)."""
    if isinstance(block, gr.Number):
        return getattr(block, "precision", None) == 0
    step, lo = getattr(block, "step", None), getattr(block, "minimum", None) or 0
    return step == 1 and float(lo).is_integer()


def _check_flag(block: Any, name: str, value: Any) -> None:
    """A ``Checkbox`` takes true or false: the text ``"false"`` is not false (Python reads any
    non-empty text as true)."""
    if isinstance(block, gr.Checkbox) and value is not None and not isinstance(value, bool):
        raise refuse(f"{name} must be true or false, got {shown(value)}")


def _check_choice(block: Any, name: str, value: Any) -> None:
    """A fixed list's value (a ``Dropdown`` or ``Radio`` that takes no other value) must be one of its
    choices: said here in one line, where Gradio's own check logs a traceback."""
    if not isinstance(block, (gr.Dropdown, gr.Radio)) or getattr(block, "allow_custom_value", False):
        return
    choices = [c[1] if isinstance(c, (tuple, list)) else c for c in block.choices or ()]
    values = value if isinstance(value, list) and getattr(block, "multiselect", False) else [value]
    bad = next((v for v in values if v is not None and v not in choices), None)
    if bad is not None:
        raise choice_error(name, bad, choices, error=refuse)


def input_names(fn: Callable[..., Any] | None, n: int) -> list[str]:
    """The handler's parameter names, as the API calls the inputs."""
    try:
        params = inspect.signature(fn).parameters.items()
        names = [k for k, p in params if p.kind <= p.POSITIONAL_OR_KEYWORD]
    except (TypeError, ValueError):
        names = []
    return (names + ["input"] * n)[:n]
