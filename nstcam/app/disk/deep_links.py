"""Deep links are off: no route writes a session's state to disk, and no page or config reads one.

Gradio answers ``GET /gradio_api/deep_link?session_hash=<S>`` by writing that session's every
component value (372-388 KB: its uploads' and results' paths among them) to
``<upload folder>/deep_links/<id>/state.json``, for anyone who knows ``S``, each time it is asked;
20 calls left 7.4 MB that no sweep removed, and ``GET /config?deep_link=<id>`` then handed anyone
that session's upload and result paths. The app has no deep-link button, so :class:`NoDeepLinks`
answers that route 404 in one line and drops a ``deep_link`` parameter from every other request
(the page and its config load as if none was given), and :func:`sweep_deep_links` removes what
servers before this one wrote.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from nstcam.app.errors import answer

__all__ = ["DEEP_LINKS_OFF", "NoDeepLinks", "sweep_deep_links", "without_deep_link"]

logger = logging.getLogger("nstcam.app")

DEEP_LINKS_OFF = "Deep links are off on this server: share a result by downloading it"
"""The one line a deep-link request is answered with."""

_ROUTE = re.compile(r"/deep_link/?$", re.IGNORECASE)
_PARAM = "deep_link"


def without_deep_link(query: bytes) -> bytes:
    """A query string with every ``deep_link`` parameter (in any case) taken out."""
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k.lower() != _PARAM]
    return urlencode(kept).encode("latin-1") if len(kept) != len(pairs) else query


class NoDeepLinks:
    """ASGI middleware: the deep-link route answered 404 (one line); a ``deep_link`` parameter
    dropped from every other request's query.

    Args:
        app: the ASGI app.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if _ROUTE.search(scope.get("path", "")):
                await answer(send, 404, DEEP_LINKS_OFF)
                return
            query = scope.get("query_string", b"")
            if _PARAM.encode() in query.lower():
                scope = {**scope, "query_string": without_deep_link(query)}
        await self.app(scope, receive, send)


def sweep_deep_links(upload_folder: str | os.PathLike) -> int:
    """Removes ``<upload folder>/deep_links`` (what Gradio's deep-link route wrote before this app
    turned it off; no nstcam server writes there); returns how many files went."""
    folder = Path(upload_folder) / "deep_links"
    if not folder.is_dir() or folder.is_symlink():
        return 0
    files = sum(1 for p in folder.rglob("*") if p.is_file())
    shutil.rmtree(folder, ignore_errors=True)
    if files:
        logger.info("removed %d deep-link file(s) that earlier servers wrote", files)
    return files
