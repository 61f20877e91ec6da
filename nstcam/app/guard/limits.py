"""What one request to the app may hold, checked before any work: the size of its body, the total of
its uploads, the event it names, the length of its texts and lists.

Gradio caps each uploaded file (``max_file_size``) but not a request: a 100 MB text in a queue
request was parsed whole (5 s, +840 MB) before a handler refused it, six 19 MB files went up in
one upload request, and a list of 100,000 class names ran until the kernel killed the server.
:class:`RequestLimits` is an ASGI middleware in front of the whole app (the page, the API, MCP):
a body over its cap gets HTTP 413 with one line, read no further than the cap; a queue request
naming an event the app does not have gets 422 (Gradio answers 500). The text and list caps are
applied per input by :mod:`nstcam.app.guard.gate`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from nstcam.app.errors import MAX_ECHO, answer
from nstcam.app.guard.quota import UploadQuota, client_of
from nstcam.app.guard.uploads import upload_files_of_this_request

__all__ = [
    "BodyTooLargeError",
    "MAX_BODY_BYTES",
    "MAX_CLASSES",
    "MAX_DEPTH",
    "MAX_ECHO",
    "MAX_INT",
    "MAX_ITEMS",
    "MAX_TEXT",
    "MAX_TOOL_FILE_BYTES",
    "MAX_TOOL_MEDIA_BYTES",
    "RequestLimits",
    "answer",
    "app_events",
    "read_body",
    "replay_body",
    "shown",
    "validation_error_handler",
]

logger = logging.getLogger("nstcam.app")

MAX_TEXT = 300
"""Characters of any text a request holds (a model, layer or method name, a class; paths inside a
file value are Gradio's own, up to :data:`MAX_PATH`)."""
MAX_PATH = 4096
MAX_ITEMS = 64
"""Items of any list a request holds (the classes picked, an image editor's layers)."""
MAX_DEPTH = 6
"""Levels a request's value may nest (an image editor's value is 3 deep)."""
MAX_INT = 2**63 - 1
"""Largest whole number a request may hold (a seed; JSON carries integers of any length)."""
MAX_CLASSES = 20
"""Classes one Grad-CAM request on a detector or a segmenter may pick (after duplicates are
dropped; never more than the model knows): each is a pass and a result file."""
MAX_TOOL_FILE_BYTES = 1_000_000
"""Bytes of a result file an MCP tool sends back inline (a report's text, a learned style as a
``data:`` URL); a larger one is named, not sent."""
MAX_TOOL_MEDIA_BYTES = 16_000_000
"""Bytes of a result clip an MCP tool sends back inline (an embedded resource); a larger one is
said in one line (a CPU server's clips are 0.1-2 MB)."""
MAX_BODY_BYTES = 1024 * 1024
"""Body of any request but an upload or an MCP call (a queue request names uploads by path:
a few kB)."""
UPLOAD_FILES = 3
"""Files of the largest size one upload request may carry in all: the image editor sends its
background, its layer and their composite at once."""
MCP_IMAGES = 2
"""Images an MCP call may carry inline (content and style), base64-encoded."""
WEBCAM_MAX_SIDE = 512
"""Largest long side a live frame is painted at: the fast network keeps up with a stream there."""
WEBCAM_PAINT_SECONDS = 120.0
"""Seconds of painting one client may use in :data:`PAINT_WINDOW` (a stream's time limit: chaining
streams does not reset it)."""
WEBCAM_PAINT_WINDOW = 600.0
MAX_LEARN_PHOTOS = 16
"""Most training photos one request may upload (each is read and checked before any work)."""
LEARN_CONTENT_WEIGHTS = (0.25, 8.0)
"""The loss' content weight a request may set (docs/style.md measures 1 and 2)."""
FEATHER_RANGE = (0, 64)
"""The mask's soft edge a request may ask for, px (the slider, the check and the API description)."""
MAX_BOX_CHARS = 80
VOLUME_MIN_SIDE = 8
"""Fewest voxels a volume may have along any axis (the video classifiers' strides)."""
VOLUME_TOP_K = 3
"""Classes the tab explains."""

_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[dict[str, Any]]]
_Send = Callable[[dict[str, Any]], Awaitable[None]]


def shown(value: Any) -> str:
    """``value`` as a message quotes it: its ``repr`` cut at :data:`MAX_ECHO` characters, with its
    length when cut."""
    text = repr(value)
    if len(text) <= MAX_ECHO:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{text[:MAX_ECHO]}… ({size})"


class BodyTooLargeError(Exception):
    """A body over its cap (:func:`read_body`)."""


class RequestLimits:
    """ASGI middleware: caps every request's body before the app reads it.

    Args:
        app: the ASGI app (Gradio's FastAPI app).
        upload_bytes: the largest upload, one file (Gradio's ``max_file_size``).
        body_bytes: any other body but an MCP call.
        quota: upload bytes per client per window (:class:`nstcam.app.guard.quota.UploadQuota`); None: none.
    """

    def __init__(
        self,
        app: Any,
        upload_bytes: int,
        body_bytes: int = MAX_BODY_BYTES,
        quota: UploadQuota | None = None,
    ) -> None:
        self.app = app
        self.quota = quota
        self.body_bytes = body_bytes
        self.upload_total = UPLOAD_FILES * upload_bytes + 64 * 1024  # + multipart headers
        self.mcp_bytes = MCP_IMAGES * (upload_bytes * 4 // 3) + body_bytes

    def _cap(self, path: str) -> tuple[int, str]:
        if path.rstrip("/").endswith("/upload"):
            return self.upload_total, f"an upload request (at most {UPLOAD_FILES} files of the largest size)"
        if "/mcp" in path:
            return self.mcp_bytes, "an MCP call"
        return self.body_bytes, "a request"

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        cap, what = self._cap(scope["path"])
        too_big = f"{what} may hold at most {cap / 2**20:.3g} MB on this server"
        declared = _content_length(scope)
        if declared is not None and declared > cap:
            await answer(send, 413, f"{too_big}; this one declares {declared / 2**20:.3g} MB")
            return
        if scope["path"].rstrip("/").endswith("/upload"):
            client = client_of(scope)
            left = self.quota.left(client) if self.quota else cap
            if declared is not None and declared > left:
                await answer(send, 429, self.quota.refusal(left, declared))
                return
            await self._stream(scope, receive, send, cap, too_big, client, left)
            return
        try:
            body = await read_body(receive, cap)
        except BodyTooLargeError:
            await answer(send, 413, too_big)
            return
        bad = _bad_json(scope, body)
        if bad:
            await answer(send, *bad)
            return
        await self.app(scope, replay_body(body, receive), send)

    async def _stream(
        self,
        scope: _Scope,
        receive: _Receive,
        send: _Send,
        cap: int,
        too_big: str,
        client: str,
        left: int,
    ) -> None:
        """An upload passed on as it comes (not held in memory), cut at ``cap`` (and at the client's
        ``left`` bytes of its quota: HTTP 429); an upload not answered 200 (cut, dropped by its
        client, refused) leaves none of its files behind; one answered 200 is counted to ``client``."""
        seen = 0
        over = gone = False
        spent = False  # over the client's quota, not the request's cap
        started = False
        status = 0

        async def counted() -> dict[str, Any]:
            nonlocal seen, over, gone, spent
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            seen += len(message.get("body", b""))
            if seen > min(cap, left):
                over, spent = True, seen <= cap
                return {"type": "http.disconnect"}
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started, status
            if over:
                return  # the app's answer to a cut body is replaced by ours
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
            await send(message)

        with upload_files_of_this_request() as remove:
            try:
                await self.app(scope, counted, watched)
            except Exception:
                if not (over or gone):
                    raise
            finally:
                if status != 200:
                    removed = remove()
                    if removed:
                        why = (
                            "cut at the size cap" if over else "dropped by its client" if gone else "refused"
                        )
                        logger.info("upload %s: removed its %d unfinished file(s)", why, removed)
        if status == 200 and self.quota is not None:
            self.quota.spend(client, seen)
        if over and not started:
            if spent and self.quota is not None:
                await answer(send, 429, self.quota.refusal(left, seen))
            else:
                await answer(send, 413, too_big)


def _content_length(scope: _Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(receive: _Receive, cap: int) -> bytes:
    """A request's whole body, read no further than ``cap`` bytes (:class:`BodyTooLargeError` past it)."""
    chunks, seen = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > cap:
            raise BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay_body(body: bytes, receive: _Receive) -> _Receive:
    """``receive`` for the app behind, which gets ``body`` (already read) first."""
    sent = False

    async def again() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def app_events(scope: _Scope) -> dict[int, Any] | None:
    """The events (Gradio's ``BlockFunction`` by index) of the app a request is to, or None where the
    request reaches no Gradio app."""
    app = scope.get("app")
    return getattr(app.get_blocks(), "fns", None) if hasattr(app, "get_blocks") else None


def _bad_json(scope: _Scope, body: bytes) -> tuple[int, str] | None:
    """Why a JSON body cannot go on, with the HTTP status to answer, or None: nested past the
    parser's recursion limit (FastAPI would answer 500 with a traceback), or a request naming no
    event of this app (:func:`_unknown_event`). A malformed body goes on: FastAPI answers it."""
    if not body.lstrip().startswith((b"{", b"[")):
        return None
    try:
        data = json.loads(body)
    except RecursionError:
        return 422, "the request is nested too deeply"
    except ValueError:
        return None
    return _unknown_event(scope, data) if isinstance(data, dict) else None


_NAMED = re.compile(r"/(?:run|api|call)/([^/]+)$")
"""A request to an endpoint by name: ``/gradio_api/run/<name>``, ``/api/<name>``, ``/call/<name>``."""


def _unknown_event(scope: _Scope, data: dict[str, Any]) -> tuple[int, str] | None:
    """A queue request or a call by name whose event the app does not have, where Gradio answers
    HTTP 500 with a traceback in the log: its ``fn_index`` (which Gradio reads first, on any route;
    the page calls ``/run/predict`` with one) must be one of the app's events (422), and without one
    the name must be one of its endpoints (404)."""
    path = scope["path"].rstrip("/")
    named = _NAMED.search(path)
    fns = app_events(scope) if named or path.endswith("/queue/join") else None
    if fns is None:
        return None
    fn_index = data.get("fn_index")
    if fn_index is not None:
        if type(fn_index) is int and fn_index in fns:
            return None
        return (
            422,
            f"fn_index must be the number of one of this app's {len(fns)} events, got {shown(fn_index)}",
        )
    if named is None or named.group(1) in {fn.api_name for fn in fns.values()}:
        return None  # Gradio's own rules apply to it
    public = (f.api_name for f in fns.values() if getattr(f, "api_visibility", "public") == "public")
    names = ", ".join(sorted({n for n in public if isinstance(n, str)}))
    return 404, f"this app has no endpoint named {shown(named.group(1))}; its endpoints: {names}"


async def validation_error_handler(request: Any, exc: Any) -> Any:
    """FastAPI's answer to a malformed request, without the input it would echo whole: one line per
    field (where it is and what is wrong)."""
    from fastapi.responses import JSONResponse

    errors = [
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()[:5]
    ]
    message = "; ".join(errors) or "malformed request"
    logger.info("request refused (HTTP 422): %s", message)
    return JSONResponse({"detail": message}, status_code=422)
