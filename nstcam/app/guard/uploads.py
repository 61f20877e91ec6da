"""Uploads that do not finish leave nothing on disk.

Gradio writes an upload's files into its upload folder as the body streams in
(``NamedTemporaryFile(delete=False)`` in its multipart parser) and removes them only when the parser
itself fails: an upload cut at the size cap (HTTP 413) or dropped by its client left each file it
had begun (+59.8 MB per request, still there after SIGTERM). So every upload request records the
files made for it (a context variable: each request its own list, whatever else runs at once), and
:class:`nstcam.app.guard.limits.RequestLimits` removes them unless the upload was answered 200.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import nstcam.app.gradio_internals as gradio_internals

__all__ = ["record_upload_files", "upload_files_of_this_request"]

logger = logging.getLogger("nstcam.app")

_MADE: ContextVar[list[str] | None] = ContextVar("nstcam_upload_files", default=None)


def _recording(factory: Callable[..., Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        f = factory(*args, **kwargs)
        made = _MADE.get()
        if made is not None:
            made.append(f.name)
        return f

    return make


def record_upload_files() -> None:
    """Makes Gradio's multipart parser say which files it creates (idempotent)."""
    from gradio import route_utils

    gradio_internals.install(route_utils, "NamedTemporaryFile", _recording)


@contextmanager
def upload_files_of_this_request() -> Iterator[Callable[[], int]]:
    """Records the files Gradio makes for the upload request running in this context; yields
    ``remove()``, which deletes those still there and returns how many."""
    record_upload_files()
    made: list[str] = []
    token = _MADE.set(made)

    def remove() -> int:
        n = 0
        for name in made:
            try:
                Path(name).unlink()
                n += 1
            except FileNotFoundError:
                pass  # Gradio removed it (a parse error) or moved it
            except OSError:
                logger.warning("could not remove an unfinished upload's file")
        return n

    try:
        yield remove
    finally:
        _MADE.reset(token)
