"""nstcam: neural style transfer and Grad-CAM on PyTorch hooks.

The names below load on first use (PEP 562): ``import nstcam`` itself loads neither PyTorch nor
PyAV nor OpenCV, so ``nstcam --version`` answers at once; ``from nstcam import StyleTransfer``
loads what the style engine needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nstcam._version import __version__

_EXPORTS: dict[str, str] = {
    "PixelAnchor": "nstcam.anchor",
    "Preprocess": "nstcam.preprocess",
    "FeatureMaps": "nstcam.features",
    "feature_maps": "nstcam.features",
    "RecognitionReport": "nstcam.subject",
    "SubjectAwareResult": "nstcam.subject",
    "heatmap_to_mask": "nstcam.mask",
    "load_mask": "nstcam.mask",
    "recognition_report": "nstcam.subject",
    "subject_aware_stylize": "nstcam.subject",
    "subject_mask": "nstcam.subject",
    "CamOptions": "nstcam.cam",
    "CamResult": "nstcam.cam",
    "GradCAM": "nstcam.cam",
    "overlay_heatmap": "nstcam.cam",
    "BatchResult": "nstcam.style",
    "Cancelled": "nstcam.style",
    "InsufficientMemoryError": "nstcam.style",
    "StepInfo": "nstcam.style",
    "StyleOptions": "nstcam.style",
    "StyleTransfer": "nstcam.style",
    "FastStyle": "nstcam.fast",
    "HookManager": "nstcam.hooks",
    "ImageError": "nstcam.image",
    "RepeatedCallError": "nstcam.hooks",
    "WeightsInfo": "nstcam.weights",
    "WeightsUnavailableError": "nstcam.weights",
    "build_model": "nstcam.weights",
    "count_hooks": "nstcam.hooks",
    "denormalize": "nstcam.image",
    "download_weights": "nstcam.weights",
    "image_to_tensor": "nstcam.image",
    "load_image": "nstcam.image",
    "normalize": "nstcam.image",
    "resize_long_side": "nstcam.image",
    "save_image": "nstcam.image",
    "tensor_to_image": "nstcam.image",
    "weights_dir": "nstcam.weights",
}
"""Public name -> the module that defines it."""

__all__ = [
    "__version__",
    "PixelAnchor",
    "Preprocess",
    "FeatureMaps",
    "feature_maps",
    "RecognitionReport",
    "SubjectAwareResult",
    "heatmap_to_mask",
    "load_mask",
    "recognition_report",
    "subject_aware_stylize",
    "subject_mask",
    "CamOptions",
    "CamResult",
    "GradCAM",
    "overlay_heatmap",
    "BatchResult",
    "Cancelled",
    "InsufficientMemoryError",
    "StepInfo",
    "StyleOptions",
    "StyleTransfer",
    "FastStyle",
    "HookManager",
    "ImageError",
    "RepeatedCallError",
    "WeightsInfo",
    "WeightsUnavailableError",
    "build_model",
    "count_hooks",
    "denormalize",
    "download_weights",
    "image_to_tensor",
    "load_image",
    "normalize",
    "resize_long_side",
    "save_image",
    "tensor_to_image",
    "weights_dir",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nstcam' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from nstcam.anchor import PixelAnchor
    from nstcam.cam import CamOptions, CamResult, GradCAM, overlay_heatmap
    from nstcam.fast import FastStyle
    from nstcam.features import FeatureMaps, feature_maps
    from nstcam.hooks import HookManager, RepeatedCallError, count_hooks
    from nstcam.image import (
        ImageError,
        denormalize,
        image_to_tensor,
        load_image,
        normalize,
        resize_long_side,
        save_image,
        tensor_to_image,
    )
    from nstcam.mask import heatmap_to_mask, load_mask
    from nstcam.preprocess import Preprocess
    from nstcam.style import (
        BatchResult,
        Cancelled,
        InsufficientMemoryError,
        StepInfo,
        StyleOptions,
        StyleTransfer,
    )
    from nstcam.subject import (
        RecognitionReport,
        SubjectAwareResult,
        recognition_report,
        subject_aware_stylize,
        subject_mask,
    )
    from nstcam.weights import (
        WeightsInfo,
        WeightsUnavailableError,
        build_model,
        download_weights,
        weights_dir,
    )
