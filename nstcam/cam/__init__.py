"""The Grad-CAM engine: class activation maps through a forward hook and a gradient hook.

Layout: ``engine`` (:class:`GradCAM`), ``hooks`` (its hook manager and the eval-mode view that
leaves a shared model's flags alone), ``methods`` (the CAM formulas and :data:`METHOD_INFO`, the
catalogue of the 24 methods), ``factorization`` (:func:`concepts`: deep feature factorization),
``layers`` (which layers to offer), ``result`` (:class:`CamResult`) and ``overlay``. Helpers:
``_passes`` (each method's whole call), ``_dispatch`` (layers, fusion, CUDA graphs), ``_fullgrad``,
``_guided``, ``_legrad`` and ``_attention`` (methods on private twins), ``_smooth`` (augmentation,
fusion), ``_checks`` (refusals), ``_maps``, ``_graphed``, ``_targets``.
"""

from nstcam.cam._target_pass import TARGET_METHODS
from nstcam.cam.engine import GradCAM
from nstcam.cam.factorization import Concepts, concepts
from nstcam.cam.hooks import CamHooks, eval_view
from nstcam.cam.layers import CAM_ARCHS, candidate_layers
from nstcam.cam.methods import METHOD_INFO, METHODS, MethodInfo
from nstcam.cam.overlay import overlay_heatmap
from nstcam.cam.result import CamResult

__all__ = [
    "CAM_ARCHS",
    "METHODS",
    "METHOD_INFO",
    "TARGET_METHODS",
    "CamHooks",
    "CamResult",
    "Concepts",
    "GradCAM",
    "MethodInfo",
    "candidate_layers",
    "concepts",
    "eval_view",
    "overlay_heatmap",
]
