"""A cancel reaches the run at once, whichever way it comes.

The page's Cancel button sets its run's stop itself (:class:`nstcam.app.runs.Runs`). An API
cancel (``POST /gradio_api/cancel``, what ``gradio_client``'s ``job.cancel()`` sends) and a closed
connection only reach Gradio, which cancels the request's task and closes its generator; but a
generator blocked in another thread waiting for the run's next update cannot be closed then, so the
run went on for another step or more (an API cancel freed the CPU 2.2 s after it at 384 px, a closed
connection 3.0 s, against 1.3 s for the page's button; with this middleware 1.3 s and 1.8 s, steps of
0.9 s: ``tests/benchmarks/bench_cancel.py``, docs/security.md).

:class:`CancelAtOnce` is an ASGI middleware that sees both before Gradio acts on them and stops the
session's run at once: an API cancel stops the run of the event it names, a closed event stream
(``GET /gradio_api/queue/data``, the one stream of a browser tab or a client session) stops every
run of that session. A run's endpoint says which runs it belongs to (:func:`mark_run`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

from nstcam.app.guard.limits import MAX_BODY_BYTES, app_events, read_body, replay_body
from nstcam.app.guard.streams import close_session_streams

__all__ = ["CancelAtOnce", "mark_run"]

logger = logging.getLogger("nstcam.app")

_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[dict[str, Any]]]
_Send = Callable[[dict[str, Any]], Awaitable[None]]


def mark_run(fn: Callable[..., Any], runs: Any, kind: str) -> Callable[..., Any]:
    """Tags an event's function with the runs (:class:`nstcam.app.runs.Runs`) and the kind of run
    it starts, for :class:`CancelAtOnce` (wrappers made with ``functools.wraps`` keep the tags)."""
    fn.nstcam_runs = (runs, kind)  # type: ignore[attr-defined]
    return fn


def _tagged(scope: _Scope, fn_index: Any) -> Iterator[tuple[Any, str]]:
    """(runs, kind) of the event ``fn_index`` of the app, or of every event with None."""
    fns = app_events(scope) or {}
    if fn_index is None:
        picked = list(fns.values())
    else:
        picked = [fns[fn_index]] if type(fn_index) is int and fn_index in fns else []
    seen = set()
    for block_fn in picked:
        tag = getattr(block_fn.fn, "nstcam_runs", None)
        if tag is not None and (id(tag[0]), tag[1]) not in seen:
            seen.add((id(tag[0]), tag[1]))
            yield tag


def _stop(scope: _Scope, session: Any, fn_index: Any, why: str) -> None:
    if not isinstance(session, str) or not session:
        return
    stopped = sum(runs.cancel_session(kind, session) for runs, kind in _tagged(scope, fn_index))
    if stopped:
        logger.info("%s: stopped %d run(s) at once", why, stopped)


class CancelAtOnce:
    """ASGI middleware: an API cancel or a closed event stream stops its session's run at once (see
    the module). Everything passes on to the app unchanged."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        path = scope.get("path", "").rstrip("/") if scope["type"] == "http" else ""
        if scope.get("method") == "POST" and path.endswith("/cancel"):
            body = await read_body(receive, MAX_BODY_BYTES)  # RequestLimits, in front, has capped it
            try:
                data = json.loads(body)
            except ValueError:
                data = None
            if isinstance(data, dict):
                _stop(scope, data.get("session_hash"), data.get("fn_index"), "an API cancel")
            await self.app(scope, replay_body(body, receive), send)
        elif scope.get("method") == "GET" and path.endswith("/queue/data"):
            session = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash", [""])[0]

            async def watched() -> dict[str, Any]:
                message = await receive()
                if message["type"] == "http.disconnect":
                    _stop(scope, session, None, "a closed event stream")
                    close_session_streams(scope, session)  # its webcam stream frees its place
                return message

            await self.app(scope, watched, send)
        else:
            await self.app(scope, receive, send)
