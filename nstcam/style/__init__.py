"""The style engine: neural style transfer on a VGG (VGG16_bn by default), features read by forward
hooks.

Layout: ``engine`` (:class:`StyleTransfer`, a thin front), ``hooks`` (its VGG hook manager),
``vgg`` (layer names read off any VGG, BatchNorm folding) and private units for each stage of a
call: ``options`` (:class:`StyleOptions`: every option, its default and its check), ``_plan`` (the
options resolved for a network), ``_balance`` (each layer's weight in the network's scale),
``_memory``, ``_targets``, ``_optimize`` (the loop), ``_progress``, ``_output``, ``_run`` (one call),
``_batch`` and ``_perceptual`` (the loss as a function of images, to train a network with);
``losses/`` (one module per style loss, and their registry) and ``_trace_sqrt`` hold the maths;
the colour maths is shared with the fast networks (``nstcam/color.py``).
"""

from nstcam.style._batch import BatchResult
from nstcam.style._perceptual import PerceptualLoss
from nstcam.style._plan import DEFAULT_CONTENT_LAYERS, DEFAULT_STYLE_LAYERS
from nstcam.style._types import Cancelled, InsufficientMemoryError, StepInfo
from nstcam.style.engine import StyleTransfer
from nstcam.style.hooks import VGGFeatureHooks
from nstcam.style.losses import STYLE_LOSSES
from nstcam.style.options import StyleChanges, StyleOptions, strength_weight, stylize_defaults
from nstcam.style.vgg import STYLE_ARCHS, VGG_LAYERS, fold_batchnorm, layer_index, vgg_layers

__all__ = [
    "DEFAULT_CONTENT_LAYERS",
    "DEFAULT_STYLE_LAYERS",
    "STYLE_ARCHS",
    "STYLE_LOSSES",
    "VGG_LAYERS",
    "BatchResult",
    "Cancelled",
    "InsufficientMemoryError",
    "PerceptualLoss",
    "StepInfo",
    "StyleChanges",
    "StyleOptions",
    "StyleTransfer",
    "VGGFeatureHooks",
    "fold_batchnorm",
    "layer_index",
    "strength_weight",
    "stylize_defaults",
    "vgg_layers",
]
