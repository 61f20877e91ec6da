"""nstcam: neural style transfer and Grad-CAM on PyTorch hooks."""

from nstcam._version import __version__
from nstcam.anchor import PixelAnchor
from nstcam.cam import CamResult, GradCAM, overlay_heatmap
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
from nstcam.style import (
    BatchResult,
    Cancelled,
    InsufficientMemoryError,
    StepInfo,
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

__all__ = [
    "PixelAnchor",
    "FeatureMaps",
    "feature_maps",
    "RecognitionReport",
    "SubjectAwareResult",
    "heatmap_to_mask",
    "load_mask",
    "recognition_report",
    "subject_aware_stylize",
    "subject_mask",
    "CamResult",
    "GradCAM",
    "overlay_heatmap",
    "BatchResult",
    "Cancelled",
    "InsufficientMemoryError",
    "StepInfo",
    "StyleTransfer",
    "HookManager",
    "ImageError",
    "RepeatedCallError",
    "WeightsInfo",
    "WeightsUnavailableError",
    "__version__",
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
