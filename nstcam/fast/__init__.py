"""Fast style transfer: pretrained feed-forward networks, one forward pass per image (issue 52)."""

from nstcam.fast._import import FastWeightsError, import_multistyle, multistyle_file
from nstcam.fast._multistyle import N_STYLES, MultiStyleNet
from nstcam.fast.engine import FastStyle, style_weights

__all__ = [
    "N_STYLES",
    "FastStyle",
    "FastWeightsError",
    "MultiStyleNet",
    "import_multistyle",
    "multistyle_file",
    "style_weights",
]
