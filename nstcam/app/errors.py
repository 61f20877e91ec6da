"""User errors: shown in the app, logged as one line (no traceback, which is kept for real faults)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import gradio as gr

__all__ = ["MAX_ECHO", "answer", "refuse", "sentence", "shorten", "stopped"]

logger = logging.getLogger("nstcam.app")

MAX_ECHO = 100
"""Characters of a bad value quoted back in a message or a log line."""

_Send = Callable[[dict[str, Any]], Awaitable[None]]

_LONG_QUOTE = re.compile(r"""(['"])([^'"\n]{N})[^'"\n]+\1""".replace("N", str(MAX_ECHO)))
_LONG_RUN = re.compile(r"\S{N}\S+".replace("N", str(2 * MAX_ECHO)))
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
"""An internal object's ``repr`` (``<ast.Call object at 0x7f...>``): never said to a stranger."""


def shorten(message: str) -> str:
    """``message`` with every quoted value over :data:`MAX_ECHO` characters cut there (a request's
    bad value is never echoed whole, to the client or the log), and any unbroken run of more than
    twice that cut too; an internal object's ``repr`` is said as ``an object``."""
    message = _OBJECT_REPR.sub("an object", message)
    message = _LONG_QUOTE.sub(lambda m: f"{m[1]}{m[2]}…{m[1]}", message)
    return _LONG_RUN.sub(lambda m: m[0][: 2 * MAX_ECHO] + "…", message)


def sentence(text: str) -> str:
    """``text`` ending with a full stop (or its own ``.``, ``!``, ``?``), so a hint can follow it."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def refuse(message: str) -> gr.Error:
    """The error to raise for an ordinary mistake (no upload, a bad layer, a size over the limit).

    Gradio shows ``message`` to the user; the server log gets one line, not a traceback. A bad value
    it quotes is cut at :data:`nstcam.app.guard.limits.MAX_ECHO` characters (:func:`shorten`).
    """
    message = shorten(message)
    logger.info("request refused: %s", message)
    return gr.Error(message, print_exception=False)


def stopped(message: str) -> gr.Error:
    """The error for a run stopped early by its user (Cancel, a closed page) or by this server's
    time budget: said to the user like a refusal, logged as what it is (not a refusal)."""
    message = shorten(message)
    logger.info("request stopped early: %s", message)
    return gr.Error(message, print_exception=False)


async def answer(send: _Send, status: int, message: str) -> None:
    """Answers a request with ``status`` and one line (JSON ``{"detail": message}``), logged once."""
    logger.info("request refused (HTTP %d): %s", status, message)
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
