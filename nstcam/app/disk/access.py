"""Who may read which file: each client reads only the uploads it sent and the results made for it.

Gradio serves every file of its upload folder to anyone who names its path
(``/gradio_api/file=<path>``) and reads any such path named in a request. Paths are named by a
hash, but they are not secrets: every upload's response and every result names one, and one leak
(a ledger once kept in that folder listed 1,079 of them) gave a stranger every other visitor's
photos. So each client carries a random token of its own, the cookie :data:`COOKIE` (set by
:class:`ClientCookie` on its first response: a browser keeps it, and so does ``gradio_client``,
which sends the cookies of its first response with every later request), and every file made in
the upload folder is granted to the client of the request that made it (:data:`ACCESS`): an upload
to its uploader, a cached result to the client whose request it answers, an example (made while the
app is built) to everyone (:data:`PUBLIC`). A file of the upload folder is then served, and read as
a request's input, only for a client it was granted to; any other client is answered as if it did
not exist (404), whether it does or not. A file granted to nobody (made outside any request after
start) is served to nobody.

A request with no valid token gets a new one, written into the request itself (so its upload and
everything it starts belong to it) and sent back in ``Set-Cookie``; a client that drops cookies
(``curl`` without ``-b``/``-c``) can therefore not use in one request what it uploaded in another.
Over HTTPS (a Space) the cookie is ``SameSite=None; Secure; Partitioned``, so that it also works in
the Space's frame on another site.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from nstcam.app.errors import answer

__all__ = [
    "ACCESS",
    "COOKIE",
    "NOT_SERVED",
    "PUBLIC",
    "Access",
    "ClientCookie",
    "as_client",
    "client_of_gradio_request",
    "current_client",
    "may_serve",
    "public_files",
    "requests_as_their_clients",
    "served_path",
]

COOKIE = "nstcam-client"
"""The name of the cookie that holds a client's token."""

PUBLIC = "*"
"""The client every client is: files granted to it (the examples) are everyone's."""

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{32}$")
_CLIENT: ContextVar[str | None] = ContextVar("nstcam_client", default=None)
_FILE_ROUTE = re.compile(r"/file[=/](.*)$", re.IGNORECASE | re.DOTALL)
"""Gradio's two file routes (``/gradio_api/file=<path>`` and ``/gradio_api/file/<path>``), matched
on the path as the router matches it (percent-decoded), in any case and under any prefix: a
request that might reach either is checked."""
_FETCHED_URL = ("http://", "https://")
"""What Gradio's file route fetches as a URL (through its public-address check) instead of
opening a file: nothing of this server's, so not decided here."""


def new_token() -> str:
    """A fresh client token: 24 random bytes, 32 URL-safe characters."""
    return secrets.token_urlsafe(24)


def token_of_cookie_header(header: str | None) -> str | None:
    """The client token in a ``Cookie`` header, or None where there is none or it is malformed."""
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and _TOKEN.match(value):
            return value
    return None


def current_client() -> str | None:
    """The client of the request this code runs for; None outside any request (a Python call)."""
    return _CLIENT.get()


@contextmanager
def as_client(client: str) -> Iterator[None]:
    """Runs the block as ``client``'s: the files it makes are granted to ``client``."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


def public_files() -> Any:
    """The block's files are everyone's (the app's examples, made while it is built)."""
    return as_client(PUBLIC)


class Access:
    """Which clients each file was granted to, by its real path; thread-safe.

    Args:
        prune_every: how many grants between two sweeps of the records of files gone from disk.
    """

    def __init__(self, prune_every: int = 1000) -> None:
        self._lock = threading.Lock()
        self._owners: dict[str, set[str]] = {}
        self._grants = 0
        self.prune_every = prune_every

    def grant(self, path: str | os.PathLike, client: str | None = None) -> None:
        """Grants ``path`` to ``client`` (default: the current request's; nobody outside one)."""
        client = client or current_client()
        if client is None:
            return  # made outside any request after start: nobody's
        real = os.path.realpath(path)
        with self._lock:
            self._owners.setdefault(real, set()).add(client)
            self._grants += 1
            prune = self._grants % self.prune_every == 0
        if prune:
            self.prune()

    def may_read(self, path: str | os.PathLike, client: str | None) -> bool:
        """Whether ``client`` may read ``path``: it was granted to that client or to everyone."""
        with self._lock:
            owners = self._owners.get(os.path.realpath(path), ())
        return PUBLIC in owners or (client is not None and client in owners)

    def prune(self) -> None:
        """Forgets the files that are gone from disk."""
        with self._lock:
            paths = list(self._owners)
        gone = [p for p in paths if not os.path.lexists(p)]
        with self._lock:
            for p in gone:
                self._owners.pop(p, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._owners)


ACCESS = Access()
"""This process's grants."""


def _upload_root() -> Path:
    import nstcam.app.gradio_internals as gradio_internals

    return Path(os.path.realpath(gradio_internals.upload_folder()))


def in_upload_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` (as named, or with its links followed) lies in Gradio's upload folder."""
    root = _upload_root()
    named = Path(os.path.abspath(path))
    return named.is_relative_to(root) or Path(os.path.realpath(named)).is_relative_to(root)


def _headers(scope: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    return list(scope.get("headers") or [])


def _secure(scope: dict[str, Any]) -> bool:
    if scope.get("scheme") == "https":
        return True
    return any(k == b"x-forwarded-proto" and v.strip().lower() == b"https" for k, v in _headers(scope))


def _set_cookie(token: str, secure: bool) -> bytes:
    same_site = "SameSite=None; Secure; Partitioned" if secure else "SameSite=Lax"
    return f"{COOKIE}={token}; Path=/; HttpOnly; {same_site}".encode()


class ClientCookie:
    """ASGI middleware: every HTTP request runs as its client's (the cookie :data:`COOKIE`, or a new
    token written into the request and sent back), and a file of the upload folder is served only
    to a client it was granted to (404 to any other, in one line, naming no path).

    Args:
        app: the ASGI app (Gradio's FastAPI app).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        cookie = ";".join(v.decode("latin-1") for k, v in headers if k == b"cookie")
        client = token_of_cookie_header(cookie)
        if client is None:
            client = new_token()
            cookie = f"{cookie}; {COOKIE}={client}" if cookie.strip() else f"{COOKIE}={client}"
            headers = [(k, v) for k, v in headers if k != b"cookie"] + [(b"cookie", cookie.encode("latin-1"))]
            scope = {**scope, "headers": headers}
            send = _with_cookie(send, _set_cookie(client, _secure(scope)))
        named = self._file_named(scope)
        if named is not None:
            if not may_serve(named, client):
                await answer(send, 404, NOT_SERVED)
                return
            send = _errors_said_plainly(send)  # Gradio's own refusals quote the path asked for
        with as_client(client):
            await self.app(scope, receive, send)

    @staticmethod
    def _file_named(scope: dict[str, Any]) -> str | None:
        """The path a GET or HEAD names on a file route (percent-decoded, as routed), or None."""
        if scope.get("method") not in ("GET", "HEAD"):
            return None
        m = _FILE_ROUTE.search(scope.get("path", ""))
        return None if m is None else m[1]


NOT_SERVED = "File not found: only files uploaded by this client or made for its requests are served"
"""The one line every refused file request gets: whose file it is, or whether one is there at all,
is never said."""


def _errors_said_plainly(send: Any) -> Any:
    """``send`` for a file route whose error answers (Gradio's 403 "File not allowed: <the path
    asked for>") become 404 with :data:`NOT_SERVED`: no path, whole value or reason goes back."""
    failed = False

    async def sending(message: dict[str, Any]) -> None:
        nonlocal failed
        if message["type"] == "http.response.start" and message.get("status", 200) >= 400:
            failed = True
            return
        if failed:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await answer(send, 404, NOT_SERVED)
            return
        await send(message)

    return sending


def served_path(named: str) -> str | None:
    """The file Gradio's file route opens for the path ``named`` in a request (after the router's
    percent-decoding): normalised as Gradio normalises it (``os.path.abspath``: ``x://..``, ``//``,
    ``/./`` and ``..`` collapse), links followed as opening it follows them; None where the route
    fetches a URL instead (``http://``, ``https://``). Raises ValueError or OSError where the name
    cannot be a path (a NUL)."""
    if named.startswith(_FETCHED_URL):
        return None
    return os.path.realpath(os.path.abspath(named))


def may_serve(named: str, client: str | None) -> bool:
    """Whether a file route may answer ``client`` for the path ``named``, decided on the file that
    would be served (:func:`served_path`), never on how it is spelled: a file of the upload folder
    only where it was granted to ``client`` (or to everyone); a path that cannot be read as one is
    refused; a file elsewhere is left to Gradio's own allow-list (its static files)."""
    try:
        served = served_path(named)
        if served is None:
            return True
        named_abs = os.path.abspath(named)
        root = _upload_root()
    except (OSError, ValueError):
        return False
    inside = Path(served).is_relative_to(root) or Path(named_abs).is_relative_to(root)
    return not inside or ACCESS.may_read(served, client)


def _with_cookie(send: Any, cookie: bytes) -> Any:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
        await send(message)

    return sending


def client_of_gradio_request(request: Any) -> str | None:
    """The client token of a request Gradio hands on (a ``gr.Request``, a Starlette request, a list
    of them for a batch: the first), or None."""
    if isinstance(request, (list, tuple)):
        request = request[0] if request else None
    if request is None:
        return None
    try:
        headers = request.headers
    except (AttributeError, KeyError):
        return None
    get = getattr(headers, "get", None)
    return token_of_cookie_header(get("cookie") if get else None)


def requests_as_their_clients(demo: Any) -> Any:
    """Runs every event of ``demo`` (``process_api``: its inputs read, its function, its outputs
    cached) as the client of its request: the client's files only are its inputs, and its results
    are granted to it. A request with no client (none reaches the queue without one) runs as a
    client of its own, which owns nothing. Idempotent; returns ``demo``."""
    import nstcam.app.gradio_internals as gradio_internals

    gradio_internals.install(demo, "process_api", _as_its_client)
    return demo


def _as_its_client(process: Any) -> Any:
    async def as_its_client(*args: Any, **kwargs: Any) -> Any:
        client = client_of_gradio_request(kwargs.get("request")) or new_token()
        with as_client(client):
            return await process(*args, **kwargs)

    return as_its_client
