"""The Blocks app: the tabs of :data:`nstcam.app.tabs.TABS` and their named API endpoints
``/stylize``, ``/stylize_video``, ``/gradcam``, ``/gradcam_video``, ``/faithfulness``, ``/trust``,
``/subject_aware`` and ``/features``
(also MCP tools), and what ``demo.launch`` needs to cap every request."""

from __future__ import annotations

from typing import Any

import gradio as gr
from fastapi.exceptions import RequestValidationError
from starlette.middleware import Middleware

from nstcam.app.access import ClientCookie, public_files, requests_as_their_clients
from nstcam.app.api_info import describe_api
from nstcam.app.cache import record_cached_files, track_cached_files
from nstcam.app.cancels import CancelAtOnce
from nstcam.app.config import AppConfig, Models
from nstcam.app.gate import guard_requests
from nstcam.app.limits import RequestLimits, validation_error_handler
from nstcam.app.mcp import enable_mcp
from nstcam.app.owned import keep_existing_uploads
from nstcam.app.streams import StreamLimits
from nstcam.app.tabs import TABS, webcam
from nstcam.app.uploads import record_upload_files
from nstcam.app.widgets import CSS, RANDOM_BANNER

__all__ = ["build_demo", "launch_kwargs"]


def launch_kwargs(config: AppConfig, mcp: bool = False) -> dict[str, Any]:
    """What ``demo.launch`` needs besides host and port: the upload cap, the caps on every request
    (:class:`nstcam.app.limits.RequestLimits`: body size, uploads in all, the event named; malformed
    requests answered in one line), each client's files served to it alone
    (:class:`nstcam.app.access.ClientCookie`), an API cancel or a closed page stopping its run at once
    (:class:`nstcam.app.cancels.CancelAtOnce`), errors shown, and with ``mcp`` the endpoints served as Model
    Context Protocol tools (``/gradio_api/mcp/``)."""
    if mcp:
        enable_mcp()
    upload_bytes = int(config.max_upload_mb * 1024 * 1024)
    return {
        "max_file_size": upload_bytes,
        "show_error": True,
        "css": CSS,
        "mcp_server": bool(mcp),
        "app_kwargs": {
            "middleware": [
                Middleware(ClientCookie),  # first: every request, uploads included, runs as its client's
                Middleware(RequestLimits, upload_bytes=upload_bytes, quota=config.upload_quota()),
                Middleware(StreamLimits),
                Middleware(CancelAtOnce),
            ],
            "exception_handlers": {RequestValidationError: validation_error_handler},
        },
    }


def build_demo(config: AppConfig | None = None, models: Models | None = None) -> gr.Blocks:
    """Builds the Gradio Blocks app (tabs "Style transfer", "Video", "Grad-CAM", "Subject-aware" and
    "Feature maps").

    Launch it with ``demo.launch(**launch_kwargs(config))`` so that uploads are capped.
    """
    config = config or AppConfig()
    models = models or Models(config)
    runs = models.runs
    record_cached_files()  # the examples' files too: they are granted to everyone
    title = "nstcam — style transfer and Grad-CAM"
    with public_files(), gr.Blocks(title=title, delete_cache=(600, 1800)) as demo:
        gr.Markdown(
            "# nstcam\nNeural style transfer on VGG16_bn and Grad-CAM on torchvision classifiers, detectors "
            "and segmenters, built on PyTorch hooks."
        )
        if config.random_weights:
            gr.Markdown(RANDOM_BANNER, elem_id="random-banner")
        for name, err in models.errors.items():
            gr.Markdown(f"⚠️ **{name} unavailable**: {err}", elem_classes=["unavailable"])
        on_cpu = config.torch_device.type == "cpu"
        limits = (
            f"Running on **{config.torch_device.type.upper()}**: outputs up to {config.max_size} px and "
            f"{config.max_steps} steps, uploads up to {config.max_upload_mb:g} MB, Score-CAM up to "
            f"{config.scorecam_budget} masked images (channels x top-k) per request"
            + (" (CPU limits; a GPU Space allows more)." if on_cpu else ".")
            + (
                " Style transfer's optimisation is unavailable (above); Fast still runs."
                if "vgg16_bn" in models.errors
                else f" Style transfer runs on {config.style_network}."
            )
        )
        gr.Markdown(limits, elem_id="limits")
        others = []
        for title, tab in TABS:
            with gr.Tab(title) as t:
                tab(config, models, runs, demo)
            others += [] if tab is webcam.tab else [t]
        webcam.stop_when_left(others)
    demo.queue(default_concurrency_limit=1 if on_cpu else 2, max_size=32)
    keep_existing_uploads()  # an upload never replaces another server's file of the same name
    record_upload_files()  # the files of an upload cut short are known (and removed)
    return requests_as_their_clients(track_cached_files(guard_requests(describe_api(demo, config))))
