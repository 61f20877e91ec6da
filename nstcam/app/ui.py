"""The Blocks app: the tabs of :data:`nstcam.app.tabs.TABS` and their named API endpoints
``/stylize``, ``/stylize_video``, ``/gradcam``, ``/gradcam_video``, ``/faithfulness``, ``/trust``,
``/subject_aware`` and ``/features``
(also MCP tools), and what ``demo.launch`` needs to cap every request."""

from __future__ import annotations

from typing import Any

import gradio as gr

import nstcam.app.guard as guard
from nstcam.app.api_info import describe_api
from nstcam.app.config import AppConfig, Models
from nstcam.app.disk.access import public_files
from nstcam.app.guard.fair import QUEUE_SIZE
from nstcam.app.tabs import TABS, webcam
from nstcam.app.widgets import CSS, RANDOM_BANNER

__all__ = ["build_demo", "launch_kwargs"]


def launch_kwargs(config: AppConfig, mcp: bool = False) -> dict[str, Any]:
    """What ``demo.launch`` needs besides host and port: the guard's (:func:`nstcam.app.guard.launch_kwargs`:
    every request capped, each client's files its own, cancels at once, with ``mcp`` the MCP tools)
    and the page's style."""
    return {**guard.launch_kwargs(config, mcp=mcp), "css": CSS}


def build_demo(config: AppConfig | None = None, models: Models | None = None) -> gr.Blocks:
    """Builds the Gradio Blocks app (tabs "Style transfer", "Video", "Grad-CAM", "Subject-aware" and
    "Feature maps").

    Launch it with ``demo.launch(**launch_kwargs(config))`` so that uploads are capped.
    """
    config = config or AppConfig()
    models = models or Models(config)
    runs = models.runs
    title = "nstcam — style transfer and Grad-CAM"
    with gr.Blocks(title=title, delete_cache=(600, 1800)) as demo, public_files():
        guard.install(demo, config)  # first: the examples' files, made while it is built, are recorded
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
    demo.queue(default_concurrency_limit=1 if on_cpu else 2, max_size=QUEUE_SIZE)
    return describe_api(demo, config)
