"""The web app (Gradio) and the Hugging Face Space, on top of the Python API.

Layout, bottom to top (``tests/test_layout.py`` holds these floors):

- ``errors`` (a message back, never a traceback or a server path), ``gradio_internals`` (every
  patch and private read of Gradio, the versions tested), ``plots``;
- ``disk/``: the files this server owns: ``files`` (results written once), ``owned`` (this
  process's uploads and results), ``cache`` (Gradio's cached files), ``access`` (a client reads its
  own files only), ``shutdown`` (a stopped server leaves nothing behind);
- ``run/runs`` (runs by session, a run's stop), ``config`` (settings, the shared models), ``layers``;
- ``guard/``: admission at a bounded cost: why a request was refused is answered there
  (``limits``, ``gate``, ``quota``, ``uploads``, ``inputs``, ``streams``, ``shapes``, ``cost``,
  ``cam_limits``, ``checks``);
- ``run/``: ``running`` (a request's worker thread, its endpoint, Cancel), ``listen``, ``cancels``;
- ``widgets`` (what the tabs share on the page), ``tools`` (tool docs), ``found`` (detectors' and
  segmenters' findings);
- ``tabs/``: one module per tab (its handler, a plain function testable without a server; its
  layout; its API endpoint, built from the handler's signature; its tool doc), the Grad-CAM tab's
  panels in ``tabs/panels/``;
- ``ui`` (the Blocks and what launching needs), ``guard.install`` (every middleware, wrapper and
  patch, installed once), ``mcp``, ``api_info``.

``app.py`` at the top of the repository launches it.
"""

from nstcam.app.config import AppConfig, Models
from nstcam.app.disk.files import Outbox
from nstcam.app.guard.gate import guard_requests
from nstcam.app.guard.inputs import SafeImage, SafeVideo, load_upload, upload_path
from nstcam.app.layers import default_layer, layer_choices
from nstcam.app.run.runs import Runs
from nstcam.app.tabs.cam import cam_handler
from nstcam.app.tabs.features import features_handler
from nstcam.app.tabs.panels.faithfulness import faithfulness_handler
from nstcam.app.tabs.panels.trust import trust_handler
from nstcam.app.tabs.style import stylize_handler
from nstcam.app.tabs.subject import subject_handler
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
