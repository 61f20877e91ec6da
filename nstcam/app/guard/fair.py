"""The queue shared fairly: a few jobs per client, taken in turn between clients.

Gradio's queue holds 32 events for everyone and serves each endpoint's waiting line first come,
first served. One client (one cookie) sent 40 requests for 512 px optimisations in 0.35 s: 33 were
queued, then every other client was answered ``503 Queue is full`` on every endpoint, still 45 s
later; with 10 jobs of one client queued, another client's Fast stylisation (0.2 s alone) waited
81 s behind them.

- :func:`job_refusal`: a client may have at most :data:`MAX_JOBS_PER_CLIENT` jobs (an endpoint's
  work: the events of a named endpoint's line, the page's button and the API alike) queued or
  running; a client that drops its cookie gets a new one with every request, so an address is held
  to the server's :attr:`~nstcam.app.AppConfig.max_jobs_per_address` as well (8;
  ``NSTCAM_MAX_JOBS_PER_ADDRESS`` raises it for a crowd behind one address). Past either, the
  request is answered HTTP 429 in one line before it joins.
- :func:`take_turns`: each endpoint's waiting line is kept in turns between addresses (each one's
  first job, then each one's second...; a job running counts as that address's turn taken), so a
  newcomer waits behind at most one job of each other address, not behind all of them.
- :class:`QueueLimits`: the middleware that applies both (and
  :func:`nstcam.app.guard.streams.stream_refusal`) to every request that joins the queue:
  ``/queue/join`` (the page, ``gradio_client``), ``/call/<name>`` and ``/call/v2/<name>`` (REST).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.disk.access import token_of_cookie_header
from nstcam.app.guard.limits import MAX_BODY_BYTES, answer, app_events, read_body, replay_body
from nstcam.app.guard.quota import client_of
from nstcam.app.guard.streams import is_stream_fn, stream_refusal

__all__ = [
    "MAX_JOBS_PER_CLIENT",
    "QUEUE_SIZE",
    "QueueLimits",
    "answered",
    "job_refusal",
    "joined_event",
    "mark_answers",
    "take_turns",
]

MAX_JOBS_PER_CLIENT = 4
"""Jobs one client (its cookie) may have queued or running at once."""
QUEUE_SIZE = 64
"""Events Gradio's queue holds in all (``max_size``): eight addresses' jobs at the default cap."""

_JOIN = re.compile(r"/(?:queue/join|call/(?:v2/)?([^/]+))/?$")


def _job_lines(blocks: Any) -> set[str]:
    """The waiting lines of the app's named endpoints (``concurrency_id``: the page's button and the
    API share their endpoint's)."""
    fns = getattr(blocks, "fns", None) or {}
    return {f.api_name for f in fns.values() if isinstance(f.api_name, str) and f.api_name}


def _is_job(block_fn: Any, lines: set[str]) -> bool:
    return block_fn.concurrency_id in lines and not is_stream_fn(block_fn.fn)


def _scope_of(event: Any) -> dict[str, Any]:
    return getattr(event.request, "scope", None) or {}


def _cookie_of(scope: dict[str, Any]) -> str | None:
    header = ";".join(v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"cookie")
    return token_of_cookie_header(header)


def answered(event: Any) -> bool:
    """Whether Gradio sent ``event``'s answer (its completion, or its error): :func:`mark_answers`."""
    return bool(getattr(event, "nstcam_answered", False))


def mark_answers() -> None:
    """Makes Gradio's queue mark each event whose completion it sends (idempotent)."""
    from gradio.queueing import Queue

    gradio_internals.install(Queue, "send_message", _marking)


def _marking(send: Any) -> Any:
    def send_message(self: Any, event: Any, event_message: Any) -> Any:
        if getattr(event_message, "msg", None) == "process_completed":
            event.nstcam_answered = True
        return send(self, event, event_message)

    return send_message


def job_refusal(scope: dict[str, Any], block_fn: Any, per_address: int) -> str | None:
    """Why a request that would queue ``block_fn`` cannot join (one line), or None: a job past
    :data:`MAX_JOBS_PER_CLIENT` for its cookie or ``per_address`` for its address."""
    app = scope.get("app")
    blocks = app.get_blocks() if hasattr(app, "get_blocks") else None
    lines = _job_lines(blocks)
    if block_fn is None or not _is_job(block_fn, lines):
        return None
    jobs = [  # an event already answered is done, though Gradio frees its worker a moment later
        _scope_of(e)
        for e in gradio_internals.queued_events(blocks)
        if not e.closed and _is_job(e.fn, lines) and not answered(e)
    ]
    cookie, address = _cookie_of(scope), client_of(scope)
    if cookie is not None and sum(_cookie_of(s) == cookie for s in jobs) >= MAX_JOBS_PER_CLIENT:
        return (
            f"one client may have at most {MAX_JOBS_PER_CLIENT} jobs queued or running on this server; "
            "wait for one to finish (or cancel it) first"
        )
    if sum(client_of(s) == address for s in jobs) >= per_address:
        return (
            f"one address may have at most {per_address} jobs queued or running on this "
            "server; wait for one to finish first"
        )
    return None


def take_turns(blocks: Any) -> None:
    """Orders every endpoint's waiting line in turns between addresses: an address's k-th waiting
    job goes in turn k, plus one for each job of that line it has running; within a turn, first come
    first served; each address's own jobs keep their order."""
    lines = _job_lines(blocks)
    running = Counter(
        (e.concurrency_id, client_of(_scope_of(e)))
        for e in gradio_internals.running_events(blocks)
        if not e.closed
    )
    for line, waiting in gradio_internals.waiting_lines(blocks).items():
        if line not in lines or len(waiting) < 2:
            continue
        seen: Counter = Counter()
        turns = []
        for at, event in enumerate(waiting):
            who = client_of(_scope_of(event))
            turns.append((running[(line, who)] + seen[who], at, event))
            seen[who] += 1
        waiting[:] = [event for *_, event in sorted(turns, key=lambda t: t[:2])]


def joined_event(scope: dict[str, Any], body: bytes) -> tuple[bool, Any]:
    """Whether a request joins the queue, and the event (Gradio's ``BlockFunction``) it names, or None
    where it names none of this app's (Gradio answers that)."""
    path = scope.get("path", "") if scope["type"] == "http" else ""
    m = _JOIN.search(path)
    if scope.get("method") != "POST" or m is None:
        return False, None
    fns = app_events(scope) or {}
    if m[1] is not None:
        return True, next((f for f in fns.values() if f.api_name == m[1]), None)
    try:
        data = json.loads(body)
    except ValueError:
        return True, None
    fn_index = data.get("fn_index") if isinstance(data, dict) else None
    return True, fns.get(fn_index) if type(fn_index) is int else None


class QueueLimits:
    """ASGI middleware: a request that would join the queue past a cap (:func:`job_refusal`,
    :func:`~nstcam.app.guard.streams.stream_refusal`) is answered HTTP 429 with one line; one that
    joins is put in its turn (:func:`take_turns`); everything else passes on unchanged (behind
    :class:`nstcam.app.guard.limits.RequestLimits`, which has capped the body).

    Args:
        app: the ASGI app.
        per_address: most jobs one address may have queued or running.
    """

    def __init__(self, app: Any, per_address: int) -> None:
        self.app = app
        self.per_address = per_address

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") != "POST" or _JOIN.search(path) is None:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, MAX_BODY_BYTES)
        _, block_fn = joined_event(scope, body)
        why = None
        if block_fn is not None:
            why = stream_refusal(scope, block_fn) or job_refusal(scope, block_fn, self.per_address)
        if why:
            await answer(send, 429, why)
            return
        await self.app(scope, replay_body(body, receive), send)
        app = scope.get("app")
        if hasattr(app, "get_blocks"):
            take_turns(app.get_blocks())
