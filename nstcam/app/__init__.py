"""The web app (Gradio) and the Hugging Face Space, on top of the Python API.

Layout: ``tabs/`` (one module per tab: its handler, a plain function testable without a server; its
layout; its API endpoint, built from the handler's signature; its tool doc), ``ui`` (the Blocks
and what launching needs), ``running`` (a request's worker thread, errors, endpoints, Cancel),
``widgets`` (what the tabs share on the page), ``layers`` (the layers offered), ``config``
(settings, the shared models, runs by session), ``files`` (uploads handed over untouched, results
written once), ``gate`` and ``limits`` (the checks every request passes first), ``tools`` (tool docs
filled in), ``found`` (detectors' and segmenters' findings), ``api_info``, ``mcp``, ``shutdown``.
``app.py`` at the top of the repository launches it.
"""

from nstcam.app.config import AppConfig, Models, Runs
from nstcam.app.files import Outbox, SafeImage, SafeVideo, load_upload, upload_path
from nstcam.app.gate import guard_requests
from nstcam.app.layers import default_layer, layer_choices
from nstcam.app.tabs.cam import cam_handler
from nstcam.app.tabs.faithfulness import faithfulness_handler
from nstcam.app.tabs.features import features_handler
from nstcam.app.tabs.style import stylize_handler
from nstcam.app.tabs.subject import subject_handler
from nstcam.app.tabs.trust import trust_handler
from nstcam.app.tabs.video import video_handler
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
    "default_layer",
    "faithfulness_handler",
    "features_handler",
    "guard_requests",
    "launch_kwargs",
    "layer_choices",
    "load_upload",
    "stylize_handler",
    "subject_handler",
    "trust_handler",
    "upload_path",
    "video_handler",
]
