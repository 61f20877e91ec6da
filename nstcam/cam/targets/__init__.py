"""Target objects and how they are explained: what a map explains when it is not a class index.

- ``objects``: the target objects (``ClassTarget``, ``BoxTarget``, ``RegionTarget``...), public here.
- ``classes``: class indices to explain (top-k, one per image), checked on the host.
- ``one_pass``: gradient and gradient-free methods on target objects: one forward pass, a backward
  pass per row. ``perturbation``: Score-CAM, SS-CAM, IS-CAM, AblationCAM on target objects.
  ``scored``: the other methods through a model whose output is the target's score.
- ``shortcuts``: detectors and segmenters recomputed cheaply from their own proposals.
- ``found``: what a detector or a segmenter found, each explained (``GradCAM.explain_found``).
"""

from nstcam.cam.targets.objects import (
    BinaryTarget,
    BoxTarget,
    ClassTarget,
    RegionTarget,
    SimilarityTarget,
    Target,
    adjoint_upsample,
    check_boxes,
    check_fit,
    flip_target,
    is_target_object,
    per_image,
    predicted,
)

__all__ = [
    "BinaryTarget",
    "BoxTarget",
    "ClassTarget",
    "RegionTarget",
    "SimilarityTarget",
    "Target",
    "adjoint_upsample",
    "check_boxes",
    "check_fit",
    "flip_target",
    "is_target_object",
    "per_image",
    "predicted",
]
