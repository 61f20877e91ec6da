"""Fast style transfer: pretrained feed-forward networks, one forward pass per image (issue 52)."""

from nstcam.fast._arbitrary import STYLE_DIM, ArbitraryNet, ArbitraryTransformer, StylePredictor
from nstcam.fast._blend import MAX_BLEND, blend_styles
from nstcam.fast._import import (
    FAST_NETS,
    FastWeightsError,
    fast_available,
    fast_file,
    import_fast,
    import_multistyle,
    multistyle_file,
    wheel_models,
)
from nstcam.fast._learn import (
    CONTENT_LAYERS,
    CONTENT_MARGIN,
    MARGIN_PENALTY,
    REFERENCE_AREA,
    SAMPLE_PHOTOS,
    TEACHERS,
    LearnCancelled,
    LearnStep,
    default_teacher,
    learn_style,
)
from nstcam.fast._learned import LearnedStyle, LearnedStyleError, holds_learned, is_style_file
from nstcam.fast._multistyle import N_STYLES, MultiStyleNet
from nstcam.fast.engine import FastStyle, style_weights

__all__ = [
    "CONTENT_LAYERS",
    "CONTENT_MARGIN",
    "FAST_NETS",
    "MARGIN_PENALTY",
    "MAX_BLEND",
    "N_STYLES",
    "REFERENCE_AREA",
    "SAMPLE_PHOTOS",
    "STYLE_DIM",
    "TEACHERS",
    "ArbitraryNet",
    "ArbitraryTransformer",
    "FastStyle",
    "FastWeightsError",
    "LearnCancelled",
    "LearnStep",
    "LearnedStyle",
    "LearnedStyleError",
    "MultiStyleNet",
    "StylePredictor",
    "blend_styles",
    "default_teacher",
    "fast_available",
    "holds_learned",
    "fast_file",
    "import_fast",
    "import_multistyle",
    "is_style_file",
    "learn_style",
    "multistyle_file",
    "style_weights",
    "wheel_models",
]
