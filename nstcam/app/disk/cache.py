"""Every file Gradio caches for this process is one Gradio and shutdown remove.

Gradio copies each file a request returns into its cache, and records the copy on the output
component (``temp_files``), which ``delete_cache`` and shutdown read. But a request's outputs are
post-processed on the session's own copies of the components, whose records nobody reads: the
results of finished requests stayed in the cache for good, past ``delete_cache``'s age and past
SIGTERM (a gradcam request left 8 of its 14 cached files; a long-lived server 32 files, 272 MB).
So every file Gradio's ``processing_utils`` saves into its cache in this process is recorded in one
set, :data:`CACHED`, that each app lists among its ``temp_file_sets``: Gradio's own timer then
removes results after their age, and :func:`nstcam.app.disk.shutdown.remove_own_files` at SIGTERM.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.disk.access import ACCESS
from nstcam.app.disk.owned import OWNED

__all__ = ["CACHED", "record_cached_files", "track_cached_files"]

CACHED: set[str] = set()
"""Paths of the files Gradio cached in this process (other processes' files are never in it)."""


def _recorded(save: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(save)
    def saved(*args: Any, **kwargs: Any) -> Any:
        start = time.time_ns() - 10**9  # a file system's clock may lag a little
        path = save(*args, **kwargs)
        if isinstance(path, str):
            CACHED.add(path)
            ACCESS.grant(path)  # the client whose request it answers (everyone's: an example)
            if _written_since(path, start):
                OWNED.add(path)  # made (or rewritten) by this call: this process's to remove
        return path

    return saved


def _written_since(path: str, start_ns: int) -> bool:
    try:
        return os.stat(path).st_ctime_ns >= start_ns
    except OSError:
        return False


def record_cached_files() -> None:
    """Makes Gradio's cache savers record each file they write (idempotent): called before the
    app's examples are built, so that their files are recorded (and granted to everyone) too."""
    from gradio import processing_utils

    for name in gradio_internals.CACHE_SAVERS:
        gradio_internals.install(processing_utils, name, _recorded)


def track_cached_files(demo: Any) -> Any:
    """Records every file Gradio caches (idempotent) and lists the record among ``demo``'s
    ``temp_file_sets``; returns ``demo``."""
    record_cached_files()
    if not any(s is CACHED for s in demo.temp_file_sets):
        demo.temp_file_sets.append(CACHED)
    return demo
