"""The app's tabs, one module each: its handler (a plain function over the Python API, testable
without a server), its layout, its API endpoint (built from the handler's signature) and the
endpoint's tool doc. A new tab is one module and its line in :data:`TABS`.

- ``style``: "Style transfer", ``/stylize``. ``learn``: "Learn a style", ``/learn_style`` (a
  painting learned as a new style for the Fast mode). ``video``: "Video", ``/stylize_video``.
- ``webcam``: "Webcam", a live stream painted by the fast network (no public endpoint).
- ``cam``: "Grad-CAM", ``/gradcam``, with its two panels in ``panels/``: ``faithfulness``
  (``/faithfulness``) and ``trust`` (``/trust``: several methods scored side by side).
- ``cam_video``: "Explain a clip", ``/gradcam_video`` (a clip explained over time).
- ``cam_volume``: "Explain a volume" (a ``.npy`` volume and a slice viewer; the page's only).
- ``subject``: "Subject-aware", ``/subject_aware``. ``features``: "Feature maps", ``/features``.
"""

from __future__ import annotations

from collections.abc import Callable

from nstcam.app.tabs import cam, cam_video, cam_volume, features, learn, style, subject, video, webcam

__all__ = ["TABS"]

TABS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("Style transfer", style.tab),
    ("Learn a style", learn.tab),
    ("Video", video.tab),
    ("Webcam", webcam.tab),
    ("Grad-CAM", cam.tab),
    ("Explain a clip", cam_video.tab),
    ("Explain a volume", cam_volume.tab),
    ("Subject-aware", subject.tab),
    ("Feature maps", features.tab),
)
"""(title, ``tab(config, models, runs, demo)``) in the page's order."""
