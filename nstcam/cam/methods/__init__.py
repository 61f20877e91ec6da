"""The CAM methods' formulas and passes, one module per family (their records: :mod:`nstcam.cam.registry`).

- ``combine``: weighted activations to a map (channel sum or first principal component).
- ``gradient``: gradient methods as terms of (A, G), their pass, Finer-CAM.
- ``shapley``: ShapleyCAM (a double backward). ``smooth``: Smooth Grad-CAM++ (noisy inputs).
- ``activation``: gradient-free maps of the activation alone, and CAM's linear head.
- ``perturbation``: Score-CAM, SS-CAM, IS-CAM, AblationCAM.
- ``fullgrad``, ``guided``, ``legrad``: methods on private twins of the network.
"""

from nstcam.cam.methods.activation import eigencam, fem_weights, kernel_pca, random_weights
from nstcam.cam.methods.combine import cam_from_weights, combine, first_component
from nstcam.cam.methods.gradient import (
    Formula,
    elementwise_terms,
    gradcam_pp_terms,
    gradcam_pp_weights,
    gradcam_terms,
    hirescam_terms,
    layercam_terms,
    xgradcam_terms,
)

__all__ = [
    "Formula",
    "cam_from_weights",
    "combine",
    "eigencam",
    "elementwise_terms",
    "fem_weights",
    "first_component",
    "gradcam_pp_terms",
    "gradcam_pp_weights",
    "gradcam_terms",
    "hirescam_terms",
    "kernel_pca",
    "layercam_terms",
    "random_weights",
    "xgradcam_terms",
]
