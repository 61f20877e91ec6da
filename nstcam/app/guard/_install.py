"""Every middleware, wrapper and patch of the guard, installed from one place."""

from __future__ import annotations

from typing import Any

import gradio as gr
from fastapi.exceptions import RequestValidationError
from starlette.middleware import Middleware

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.disk.access import ClientCookie, requests_as_their_clients
from nstcam.app.disk.cache import track_cached_files
from nstcam.app.disk.deep_links import NoDeepLinks, sweep_deep_links
from nstcam.app.disk.owned import keep_existing_uploads, sweep_leftovers
from nstcam.app.disk.shutdown import stop_on_signals
from nstcam.app.guard.fair import QueueLimits, mark_answers
from nstcam.app.guard.gate import guard_requests
from nstcam.app.guard.limits import RequestLimits, validation_error_handler
from nstcam.app.guard.quota import upload_quota
from nstcam.app.guard.uploads import record_upload_files
from nstcam.app.mcp import enable_mcp
from nstcam.app.run.cancels import CancelAtOnce

__all__ = ["install", "launch_kwargs", "start_process"]


def install(demo: gr.Blocks, config: Any) -> gr.Blocks:
    """Guards ``demo``: call it first inside the app's ``gr.Blocks`` (idempotent; returns ``demo``).

    - every request's values checked where Gradio first sees them (:mod:`~nstcam.app.guard.gate`);
    - every event run as its request's client, its inputs that client's files only
      (:mod:`nstcam.app.disk.access`);
    - every file Gradio caches recorded, granted to the client it answers and removed after its age
      and at shutdown (:mod:`nstcam.app.disk.cache`), the examples' files (made while the app is
      built) included;
    - an upload never replacing another server's file of the same name, Gradio's sweeps removing
      this process's files only (:mod:`nstcam.app.disk.owned`), and the files of an upload cut short
      known and removed (:mod:`~nstcam.app.guard.uploads`).

    ``config`` (:class:`nstcam.app.AppConfig`) is read at launch (:func:`launch_kwargs`).
    """
    del config  # the per-request limits are read at launch and in each endpoint's cost
    guard_requests(demo)
    requests_as_their_clients(demo)
    track_cached_files(demo)
    keep_existing_uploads()
    record_upload_files()
    mark_answers()
    return demo


def launch_kwargs(config: Any, mcp: bool = False) -> dict[str, Any]:
    """What ``demo.launch`` needs besides host and port: the upload cap, the caps on every request
    (:class:`~nstcam.app.guard.limits.RequestLimits`: body size, uploads in all, the event named,
    each client's upload quota; malformed requests answered in one line), each client's files served
    to it alone (:class:`nstcam.app.disk.access.ClientCookie`), deep links off
    (:class:`nstcam.app.disk.deep_links.NoDeepLinks`), each client's jobs and live streams capped and
    the queue taken in turns (:class:`~nstcam.app.guard.fair.QueueLimits`), an API cancel or a closed
    page stopping its run at once (:class:`nstcam.app.run.cancels.CancelAtOnce`), errors shown, and
    with ``mcp`` the endpoints served as Model Context Protocol tools (``/gradio_api/mcp/``), each
    call as its caller's and no server path in what it returns."""
    if mcp:
        enable_mcp()
    upload_bytes = int(config.max_upload_mb * 1024 * 1024)
    return {
        "max_file_size": upload_bytes,
        "show_error": True,
        "mcp_server": bool(mcp),
        "app_kwargs": {
            "middleware": [
                Middleware(ClientCookie),  # first: every request, uploads included, runs as its client's
                Middleware(NoDeepLinks),  # no session's state written to disk or read back
                Middleware(RequestLimits, upload_bytes=upload_bytes, quota=upload_quota(config)),
                Middleware(QueueLimits, per_address=config.max_jobs_per_address),
                Middleware(CancelAtOnce),
            ],
            "exception_handlers": {RequestValidationError: validation_error_handler},
        },
    }


def start_process(models: Any, holder: dict[str, Any]) -> int:
    """Before a serving process's first request: removes what crashed servers left in the upload
    folder (theirs only: :func:`nstcam.app.disk.owned.sweep_leftovers`) and makes any signal (a Space
    restarting, ``kill``, Ctrl+C) stop the runs, remove this process's files and exit 0
    (:func:`nstcam.app.disk.shutdown.stop_on_signals`; ``holder["demo"]`` is the app, once built).
    Returns how many leftovers were removed."""
    removed = sweep_leftovers(gradio_internals.upload_folder())
    removed += sweep_deep_links(gradio_internals.upload_folder())
    stop_on_signals(models, holder)
    return removed
