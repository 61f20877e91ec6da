"""The Grad-CAM engine: class activation maps through a forward hook and a gradient hook.

Layout: ``engine`` (:class:`GradCAM`), ``options`` (:class:`CamOptions`: how an engine explains),
``registry`` (one record per CAM method: what the engine, the app, the CLI and the docs read),
``methods/`` (the methods' formulas and passes, one module per family), ``targets/`` (target objects,
their passes, detectors' and segmenters' findings), ``kinds`` (classifier, detector or segmenter),
``hooks`` (its hook manager and the eval-mode view that leaves a shared model's flags alone),
``factorization`` (:func:`concepts`: deep feature factorization), ``layers`` (which layers to offer),
``result`` (:class:`CamResult`, faithfulness), ``clips`` (a clip explained over time:
:class:`VideoCamResult`), ``volumes`` (3D volumes), ``overlay`` and ``files``.
Helpers: ``_dispatch`` (layers, fusion, CUDA graphs), ``_graphed`` (CUDA graphs), ``_smooth``
(augmentation, fusion), ``_checks`` (settings), ``_maps`` (shared steps), ``_tail``, ``_attention``.
"""

from nstcam._checks import StoppedEarly
from nstcam.cam.clips import ClipClass, VideoCamResult, score_text
from nstcam.cam.engine import GradCAM
from nstcam.cam.factorization import Concepts, concepts
from nstcam.cam.hooks import CamHooks, eval_view
from nstcam.cam.kinds import arch_kind, model_kind
from nstcam.cam.layers import CAM_ARCHS, VIDEO_ARCHS, candidate_layers
from nstcam.cam.options import CamChanges, CamOptions
from nstcam.cam.overlay import overlay_heatmap
from nstcam.cam.registry import (
    METHOD_INFO,
    METHODS,
    PERTURBATION_METHODS,
    REGISTRY,
    SPACETIME_METHODS,
    TARGET_METHODS,
    Method,
    MethodInfo,
)
from nstcam.cam.result import CamResult
from nstcam.cam.volumes import VolumeResult

__all__ = [
    "CAM_ARCHS",
    "METHODS",
    "METHOD_INFO",
    "PERTURBATION_METHODS",
    "REGISTRY",
    "SPACETIME_METHODS",
    "TARGET_METHODS",
    "VIDEO_ARCHS",
    "CamChanges",
    "CamHooks",
    "CamOptions",
    "CamResult",
    "ClipClass",
    "Concepts",
    "GradCAM",
    "Method",
    "MethodInfo",
    "StoppedEarly",
    "VideoCamResult",
    "VolumeResult",
    "arch_kind",
    "candidate_layers",
    "concepts",
    "eval_view",
    "model_kind",
    "overlay_heatmap",
    "score_text",
]
