"""The web app (Gradio) and the Hugging Face Space, on top of the Python API.

Layout: ``config`` (settings, the shared models, runs by session), ``files`` (uploads handed over
untouched, results written once), ``gate`` (the check every request passes first), ``handlers``
(plain functions, testable without a server) and ``ui`` (the Blocks and the named API endpoints).
``app.py`` at the top of the repository launches it.
"""

from nstcam.app.config import AppConfig, Models, Runs
from nstcam.app.files import Outbox, SafeImage, SafeVideo, load_upload, upload_path
from nstcam.app.gate import guard_requests
from nstcam.app.handlers import (
    cam_handler,
    faithfulness_handler,
    layer_choices,
    stylize_handler,
    subject_handler,
)
from nstcam.app.ui import build_demo, launch_kwargs

__all__ = [
    "AppConfig",
    "Models",
    "Outbox",
    "Runs",
    "SafeImage",
    "SafeVideo",
    "build_demo",
    "cam_handler",
    "faithfulness_handler",
    "guard_requests",
    "launch_kwargs",
    "layer_choices",
    "load_upload",
    "stylize_handler",
    "subject_handler",
    "upload_path",
]
