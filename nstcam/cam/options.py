"""How a :class:`~nstcam.GradCAM` explains, in one place: :class:`CamOptions`.

``GradCAM(arch, weights, ..., **changes)`` builds one from its keywords (so ``GradCAM("resnet50",
method="gradcam++", alpha=0.4)`` reads as it always did) or takes one ready (``options=``), as
:class:`nstcam.StyleOptions` is to a stylisation. Everything but the network (``arch``, ``weights``,
``device``, ``model``) is here, with its default and the checks that need no model; what depends on the
model (a layer's name, a method that cannot work on it) is checked when the engine is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from nstcam._checks import finite, whole
from nstcam._choices import one_of
from nstcam._options import option_names, options_of, shows_options
from nstcam.cam._checks import method_options
from nstcam.cam.auto_layer import LAYER_METRICS
from nstcam.image import ImageSource
from nstcam.layouts import LAYOUTS

__all__ = ["CAM_OPTION_NAMES", "CamChanges", "CamOptions", "shows_cam_options"]

NOISE_METHODS = ("smoothgradcam++", "sscam", "iscam")
"""The methods that sample noise: ``std=`` one number with one of them (and no ``mean`` or
``transform``) is their noise's, as it meant before ``noise_std=`` existed."""


@dataclass(frozen=True, kw_only=True)
class CamOptions:
    """How a :class:`~nstcam.GradCAM` explains, checked when made (a bad value raises ``ValueError``
    naming the option and what it accepts; an unknown name, ``TypeError`` naming the closest).
    Each is documented in :class:`~nstcam.GradCAM`'s arguments.

    Attributes:
        target_layer: a layer's name, several, ``"auto"``, or None (the family's default).
        method: one of :data:`nstcam.cam.METHODS`.
        input_size: images' shorter side in pixels (None: the weights' crop size).
        scorecam_batch: masked or ablated images per forward pass.
        colormap: matplotlib colormap of overlays.
        alpha: opacity of the heatmap in overlays, 0 to 1.
        cuda_graphs: replay gradient passes from CUDA graphs (None: on for CUDA).
        layout: the target layer's activation layout, one of :data:`nstcam.layouts.LAYOUTS` or None.
        fuse: how several layers' maps become one: ``"mean"``, ``"max"`` or ``"product"``.
        n_samples: samples of the noise methods (None: theirs).
        std: the model's normalisation std (or, read as ``noise_std``, see :data:`NOISE_METHODS`).
        seed: seeds a call's random numbers.
        mean: the model's per-channel mean.
        transform: the model's preprocessing (:class:`nstcam.Preprocess`, a torchvision weights
            transform or a timm data config).
        noise_std: the noise methods' noise.
        frames: a video or volume model's window in frames.
        layer_images: ``target_layer="auto"``'s photos.
        layer_metric: ``target_layer="auto"``'s metric, one of :data:`nstcam.cam.auto_layer.LAYER_METRICS`.
        layer_candidates: ``target_layer="auto"``'s layers.
    """

    target_layer: str | Sequence[str] | None = None
    method: str = "gradcam"
    input_size: int | None = None
    scorecam_batch: int = 32
    colormap: str = "jet"
    alpha: float = 0.5
    cuda_graphs: bool | None = None
    layout: str | None = None
    fuse: str = "mean"
    n_samples: int | None = None
    std: Sequence[float] | float | None = None
    seed: int = 0
    mean: Sequence[float] | float | None = None
    transform: Any = None
    noise_std: float | None = None
    frames: int | None = None
    layer_images: Sequence[ImageSource] | None = None
    layer_metric: str = "deletion"
    layer_candidates: Sequence[str] | None = None

    def __post_init__(self) -> None:
        std, noise = _std_meant(self.method, self.mean, self.std, self.noise_std, self.transform)
        picked = method_options(self.method, self.fuse, self.n_samples, noise, self.seed)
        fuse, n_samples, noise, seed = picked
        if self.layout is not None:
            one_of("layout", self.layout, LAYOUTS, also=" or None (read from the shape)")
        one_of("layer_metric", self.layer_metric, LAYER_METRICS)
        checked = {
            "std": std,
            "noise_std": noise,
            "fuse": fuse,
            "n_samples": n_samples,
            "seed": seed,
            "input_size": _size(self.input_size),
            "scorecam_batch": whole("scorecam_batch", self.scorecam_batch, minimum=1),
            "alpha": finite("alpha", self.alpha, minimum=0, maximum=1),
        }
        for name, value in checked.items():  # frozen: the checked values replace what was given
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, options: CamOptions | None = None, /, **changes: Any) -> CamOptions:
        """``options`` (default: the defaults) with ``changes``: the keyword API's way in.

        Raises:
            TypeError: ``options`` is not a CamOptions, or a change names no option (the message
                names the closest).
            ValueError: a value is out of range.
        """
        return options_of(cls, options, changes, "a GradCAM option")


CAM_OPTION_NAMES: tuple[str, ...] = option_names(CamOptions)
"""Every option's name, in the order of :class:`CamOptions`."""


class CamChanges(TypedDict, total=False):
    """The options as keywords (PEP 692's ``**changes: Unpack[CamChanges]``), for type checkers and
    IDEs; ``test_layout`` keeps them equal to :class:`CamOptions`, field by field."""

    target_layer: str | Sequence[str] | None
    method: str
    input_size: int | None
    scorecam_batch: int
    colormap: str
    alpha: float
    cuda_graphs: bool | None
    layout: str | None
    fuse: str
    n_samples: int | None
    std: Sequence[float] | float | None
    seed: int
    mean: Sequence[float] | float | None
    transform: Any
    noise_std: float | None
    frames: int | None
    layer_images: Sequence[ImageSource] | None
    layer_metric: str
    layer_candidates: Sequence[str] | None


shows_cam_options = shows_options(CamOptions)
"""``**changes`` of a function shown as every GradCAM option (:func:`nstcam._options.shows_options`)."""


def _size(input_size: int | None) -> int | None:
    return None if input_size is None else whole("input_size", input_size, minimum=16)


def _std_meant(method: str, mean: Any, std: Any, noise_std: float | None, transform: Any) -> tuple[Any, Any]:
    """(normalisation std, noise std): ``std`` is the model's normalisation, except one number
    given with a noise-sampling method and no ``mean`` or ``transform``: that is the noise's."""
    legacy = method in NOISE_METHODS and mean is None and transform is None and noise_std is None
    if legacy and isinstance(std, (int, float)) and not isinstance(std, bool):
        return None, std
    return std, noise_std
