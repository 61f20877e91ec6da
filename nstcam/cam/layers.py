"""Which models and layers Grad-CAM offers, and how each known architecture is read.

Every torchvision classifier in :data:`nstcam.weights.ARCHS` is known: its default target layer (one
that gives a meaningful map), its layout (:mod:`nstcam.layouts`), and its input size from the
official weights' transforms. The rules come from the model's structure, so a model passed as
``model=`` of one of these families gets them too:

- ResNet: ``layer4``; RegNet: ``trunk_output``; DenseNet: ``features.norm5``.
- ConvNeXt, EfficientNet, MobileNetV3: the last module of ``features``; VGG: its last ReLU.
- ViT: the last encoder block's first norm, ``encoder.layers.encoder_layer_11.ln_1`` for ViT-B (the
  last block's output reaches the head only through the class token, so patch tokens there get no
  gradient: pytorch-grad-cam #363, #513); tokens; the exact square ``image_size`` the model takes.
- Swin: the last block's second norm, ``features.7.1.norm2``; channels-last.
- Video classifiers (clips (N, 3, T, H, W), :data:`VIDEO_ARCHS`): R3D, MC3, R(2+1)D ``layer4`` and S3D
  the last module of ``features``, (N, C, t, h, w); MViT the last block's ``norm1``, tokens
  (N, 1 + t*h*w, C), exactly 16 frames of 224 px squares; Swin3D ``norm``, channels-last
  (N, t, h, w, C). Each takes 16-frame windows (the official weights' clip length).
- timm models (``GradCAM("timm:<name>")`` or any timm model): a ViT-like one (``blocks`` and class
  tokens: ViT, DeiT, BEiT...) the last block's first norm, tokens, its fixed square; every other the
  last activated feature map, found by one forward pass of a hook-free twin at timm's input size:
  the last module to finish whose output still has a spatial extent (EfficientNet and MobileNet:
  ``bn2``; ConvNeXt: ``norm_pre``; ResNet: ``layer4``; RegNet: ``final_conv``; Swin: ``norm``), with
  no reshape code (the layout is read from the shape).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from nstcam._choices import one_of
from nstcam.hooks import resolve_modules, twin
from nstcam.weights import ARCHS, DETECTORS, SEGMENTERS, VIDEO_ARCHS

__all__ = [
    "CAM_ARCHS",
    "DETECTOR_ARCHS",
    "SEGMENTER_ARCHS",
    "VIDEO_ARCHS",
    "ArchSpec",
    "arch_spec",
    "candidate_layers",
    "check_layer",
    "clip_frames",
    "is_video_model",
    "layers",
    "reading",
    "skeleton",
]

CAM_ARCHS = tuple(ARCHS)
"""Classifiers ``GradCAM(arch)`` builds (official weights through the weights registry)."""
SEGMENTER_ARCHS = tuple(SEGMENTERS)
"""Segmentation models ``GradCAM(arch)`` builds: explained by class region (:class:`RegionTarget`)."""
DETECTOR_ARCHS = tuple(DETECTORS)
"""Detectors ``GradCAM(arch)`` builds: explained by box (:class:`BoxTarget`), at their FPN's levels."""
CLIP_FRAMES = 16
"""Frames of a video classifier's window: the official Kinetics weights' clip length."""
_VIDEO_TYPES = ("VideoResNet", "S3D", "MViT", "SwinTransformer3d")


@dataclass(frozen=True)
class ArchSpec:
    """How Grad-CAM reads one model.

    Attributes:
        default_layer: the target layer used when none is given.
        layout: ``"nchw"``, ``"tokens"`` or ``"nhwc"``; None: read from the activation's shape.
        square: the model takes only this exact square input size (ViT), else None.
        frames: a video classifier's window in frames (None: the model explains images).
    """

    default_layer: str
    layout: str | None
    square: int | None = None
    frames: int | None = None


def _family(model: nn.Module) -> str:
    from nstcam.cam.kinds import model_kind

    kind = model_kind(model)
    if kind != "classifier":
        return kind
    if type(model).__module__.startswith("timm."):
        return "timm"
    names = {type(model).__name__}
    if names & set(_VIDEO_TYPES):
        return "video"
    if "VisionTransformer" in names:
        return "vit"
    if "SwinTransformer" in names:
        return "swin"
    if "DenseNet" in names:
        return "densenet"
    if "RegNet" in names:
        return "regnet"
    if hasattr(model, "layer4"):
        return "resnet"
    if isinstance(getattr(model, "features", None), nn.Sequential):
        return "vgg" if "VGG" in names else "features"
    return "other"


def arch_spec(model: nn.Module) -> ArchSpec:
    """The :class:`ArchSpec` of a model, from its structure (any model: ``layer4`` if it has one).

    Raises:
        ValueError: a model of no known family: give ``target_layer`` (and ``layout`` if needed).
    """
    family = _family(model)
    if family == "timm":
        return _timm_spec(model)
    if family == "detector":  # the FPN's (or SSD's) levels, as a dict: read without user code
        return ArchSpec("backbone", "nchw")
    if family == "video":
        return _video_spec(model)
    if family == "segmenter":
        body = model.backbone
        return ArchSpec("backbone.layer4" if hasattr(body, "layer4") else f"backbone.{len(body) - 1}", "nchw")
    if family == "vit":
        last = list(model.encoder.layers.named_children())[-1][0]
        return ArchSpec(f"encoder.layers.{last}.ln_1", "tokens", int(model.image_size))
    if family == "swin":
        stage = len(model.features) - 1
        return ArchSpec(f"features.{stage}.{len(model.features[stage]) - 1}.norm2", "nhwc")
    if family == "densenet":
        return ArchSpec("features.norm5", "nchw")
    if family == "regnet":
        return ArchSpec("trunk_output", "nchw")
    if family == "resnet":
        return ArchSpec("layer4", "nchw")
    if family == "vgg":
        relus = [i for i, m in enumerate(model.features) if isinstance(m, nn.ReLU)]
        return ArchSpec(f"features.{relus[-1]}", "nchw")
    if family == "features":
        return ArchSpec(f"features.{len(model.features) - 1}", "nchw")
    raise ValueError(
        f"no default target layer for a {type(model).__name__}: pass target_layer= (one of its "
        "named_modules(); nstcam.cam.candidate_layers(model) lists likely ones)"
    )


def _video_spec(model: nn.Module) -> ArchSpec:
    name = type(model).__name__
    if name == "MViT":  # its position encoding is of 8 x 56 x 56 patches: 16 frames of 224 px exactly
        return ArchSpec(f"blocks.{len(model.blocks) - 1}.norm1", "tokens", 224, CLIP_FRAMES)
    if name == "SwinTransformer3d":
        return ArchSpec("norm", "nthwc", None, CLIP_FRAMES)
    if name == "S3D":
        return ArchSpec(f"features.{len(model.features) - 1}", "ncthw", None, CLIP_FRAMES)
    return ArchSpec("layer4", "ncthw", None, CLIP_FRAMES)


def is_video_model(model: nn.Module) -> bool:
    """Whether ``model`` takes clips or volumes (N, C, T, H, W): a known video family, or any 3D
    convolution."""
    return _family(model) == "video" or any(isinstance(m, nn.Conv3d) for m in model.modules())


def clip_frames(model: nn.Module, frames: int | None = None) -> int | None:
    """The window in frames a model explains (None: an image model): ``frames`` if given, else its
    family's (16), else 16 for any model with 3D convolutions."""
    if frames is not None and (
        isinstance(frames, bool) or not isinstance(frames, int) or not 1 <= frames <= 512
    ):
        raise ValueError(f"frames must be a whole number from 1 to 512, got {str(frames)[:20]}")
    if not is_video_model(model):
        if frames is not None:
            raise ValueError(
                f"frames is the window of a video classifier; this {type(model).__name__} takes images "
                "(no 3D convolution): leave frames unset"
            )
        return None
    try:
        spec = arch_spec(model)
    except ValueError:
        spec = ArchSpec("", None, None, CLIP_FRAMES)
    known = spec.frames or CLIP_FRAMES
    if frames is None:
        return known
    if type(model).__name__ == "MViT" and frames != known:
        raise ValueError(f"frames={frames}, but an MViT takes exactly {known} frames: leave frames unset")
    return frames


def _timm_size(model: nn.Module) -> tuple[int, bool]:
    """(input side, whether the model takes only that size) from timm's ``pretrained_cfg``."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size") or (3, 224, 224)
    return int(size[-1]), bool(cfg.get("fixed_input_size", False))


_TIMM_SPECS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _timm_spec(model: nn.Module) -> ArchSpec:
    """A timm model's reading (module docstring), found once per model."""
    spec = _TIMM_SPECS.get(model)
    if spec is None:
        spec = _TIMM_SPECS[model] = _find_timm_spec(model)
    return spec


def _find_timm_spec(model: nn.Module) -> ArchSpec:
    size, fixed = _timm_size(model)
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.Sequential) and len(blocks) and getattr(model, "num_prefix_tokens", 0):
        last = len(blocks) - 1
        norm = "norm1" if hasattr(blocks[last], "norm1") else ""
        return ArchSpec(f"blocks.{last}.{norm}".rstrip("."), "tokens", size if fixed else None)
    net = twin(model)  # hooks on a twin: another thread's use of the model never sees them
    finished: list[tuple[str, tuple[int, ...]]] = []
    handles = []
    for name, m in net.named_modules():
        if name:
            hook = functools.partial(_record, finished, name)
            handles.append(m.register_forward_hook(lambda _m, _i, out, hook=hook: hook(out)))
    try:
        p = next(iter(net.parameters()), None)
        x = torch.zeros(1, 3, size, size, device=p.device if p is not None else "cpu")
        with torch.no_grad():
            net(x)
    finally:
        for h in handles:
            h.remove()
    spatial = [name for name, shape in finished if len(shape) == 4 and sorted(shape[1:])[1] > 1]
    if not spatial:
        raise ValueError(
            f"no default target layer for a {type(model).__name__}: pass target_layer= (one of its "
            "named_modules(); nstcam.cam.candidate_layers(model) lists likely ones)"
        )
    return ArchSpec(spatial[-1], None, size if fixed else None)


def _record(finished: list, name: str, out: object) -> None:
    if isinstance(out, torch.Tensor):
        finished.append((name, tuple(out.shape)))


def candidate_layers(model: nn.Module) -> list[str]:
    """Layers worth explaining, coarse to fine within each stage, the default among them: ResNet
    stages and blocks (``layer4``, ``layer4.2``), ViT blocks' first norms, Swin stages and their
    blocks' second norms, RegNet blocks, timm's feature stages, and the modules of ``features``
    for the rest."""
    family = _family(model)
    if family == "timm":
        stages = [f["module"] for f in getattr(model, "feature_info", []) if isinstance(f, dict)]
        default = _timm_spec(model).default_layer
        return [*(n for n in stages if n != default), default]
    if family == "detector":
        return [
            "backbone",
            *(f"backbone.body.{n}" for n, _ in getattr(model.backbone, "body", nn.Module()).named_children()),
        ]
    if family == "segmenter":
        body = model.backbone
        return ["backbone." + n for n, _ in body.named_children() if n.startswith("layer") or n.isdigit()]
    if family == "video":
        return _video_layers(model)
    if family == "resnet":
        names = []
        for name, m in model.named_children():
            if isinstance(m, nn.Sequential) and len(m) and name.startswith("layer"):
                names.append(name)
                names.extend(f"{name}.{i}" for i in range(len(m)))
            elif isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d)):
                names.append(name)
        return names
    if family == "vit":
        return [f"encoder.layers.{name}.ln_1" for name, _ in model.encoder.layers.named_children()]
    if family == "swin":
        names = []
        for i, stage in enumerate(model.features):
            if i % 2 == 1:  # stages; the even modules patch-merge between them
                names.append(f"features.{i}")
                names.extend(f"features.{i}.{j}.norm2" for j in range(len(stage)))
        return names
    if family == "regnet":
        return [
            "stem",
            *(f"trunk_output.{n}" for n, _ in model.trunk_output.named_children()),
            "trunk_output",
        ]
    if family in ("densenet", "vgg", "features"):
        return [f"features.{n}" for n, _ in model.features.named_children()]
    return [n for n, m in model.named_children() if isinstance(m, (nn.Conv2d, nn.Sequential))]


def _video_layers(model: nn.Module) -> list[str]:
    name = type(model).__name__
    if name == "MViT":
        return [f"blocks.{i}.norm1" for i in range(len(model.blocks))]
    if name == "SwinTransformer3d":
        return [*(f"features.{i}" for i in range(0, len(model.features), 2)), "norm"]
    if name == "S3D":
        return [f"features.{i}" for i in range(len(model.features))]
    return [
        n
        for n, m in model.named_modules()
        if n.count(".") <= 1 and (n.startswith("layer") or n == "stem") and not n.endswith(("relu", "bn"))
    ]


@functools.cache
def skeleton(arch: str) -> nn.Module:
    """An untrained ``arch`` to read its structure: on the meta device (no memory), or, for the few
    builders that compute with tensors (RegNet), on the CPU once."""
    known = {**ARCHS, **SEGMENTERS, **DETECTORS, **VIDEO_ARCHS}
    one_of("arch", arch, known)
    extra = {} if arch in ARCHS or arch in VIDEO_ARCHS else {"weights_backbone": None}
    try:
        with torch.device("meta"):
            return known[arch][0](weights=None, **extra).eval()
    except NotImplementedError:
        return known[arch][0](weights=None, **extra).eval()


def layers(arch: str) -> list[str]:
    """The candidate target layers of a known ``arch`` (:func:`candidate_layers`; no weights loaded)."""
    return candidate_layers(skeleton(arch))


def check_layer(model: nn.Module, layer: str) -> None:
    """Raises ``ValueError`` listing the closest valid names if ``layer`` is not in ``model``."""
    resolve_modules(model, [layer])


def _official_size(arch: str | None) -> int:
    """The shorter side the official weights' transforms give: a classifier's crop (224 for most),
    a segmenter's resize (520); a detector resizes inside itself (its size is its own: 0)."""
    if arch in ARCHS:
        return ARCHS[arch][1].transforms().crop_size[0]
    if arch in SEGMENTERS:
        return int(SEGMENTERS[arch][1].transforms.keywords.get("resize_size", 520))
    if arch in DETECTORS:
        return 0
    if arch in VIDEO_ARCHS:
        return VIDEO_ARCHS[arch][1].transforms().crop_size[0]
    return 224


def reading(
    model: nn.Module, arch: str | None, target_layer: str | None, layout: str | None, input_size: int | None
) -> tuple[str, str | None, int, int | None]:
    """How an engine reads ``model``: (target layer, layout, input size, square size or None), the
    given values first, else the known family's (:func:`arch_spec`) and the official weights'
    crop size (224 for a model of unknown weights).

    Raises:
        ValueError: no target layer is known, or an input size a fixed-size model cannot take.
    """
    try:
        spec = arch_spec(model)
    except ValueError:
        if target_layer is None:
            raise
        spec = ArchSpec(target_layer, None)
    layer = target_layer or spec.default_layer
    if layout is None and layer == spec.default_layer:
        layout = spec.layout
    if input_size is None:
        input_size = spec.square or _official_size(arch)
    if spec.square is not None and input_size != spec.square:
        raise ValueError(
            f"input_size={input_size}, but this {type(model).__name__} takes exactly {spec.square} px "
            f"squares: leave input_size unset (or build the model with image_size={input_size})"
        )
    return layer, layout, input_size, spec.square
