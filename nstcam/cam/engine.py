"""The Grad-CAM engine: :class:`GradCAM`, CAM maps for ResNets (or any CNN) through a forward hook
and a gradient hook on the recorded activation.

Example:
    >>> cam = GradCAM("resnet50", weights="imagenet")
    >>> for r in cam.explain("cat.jpg", top_k=3):
    ...     print(r.label, r.score); r.overlay.save(f"{r.label}.png")
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image
from torch import nn

from nstcam._checks import whole
from nstcam._choices import closest
from nstcam._device import pick_device
from nstcam.cam._dispatch import Spec, explain_targets, raw_maps, split_targets
from nstcam.cam._graphed import CamGraphs, graph_stats
from nstcam.cam._maps import upsample_maps
from nstcam.cam._passes import PassWatch
from nstcam.cam._spacetime import SpaceTime, check_batch
from nstcam.cam.auto_layer import LayerChoosing
from nstcam.cam.hooks import eval_view
from nstcam.cam.kinds import model_kind
from nstcam.cam.layers import (
    CAM_ARCHS,
    DETECTOR_ARCHS,
    SEGMENTER_ARCHS,
    VIDEO_ARCHS,
    candidate_layers,
    clip_frames,
)
from nstcam.cam.options import CamChanges, CamOptions, shows_cam_options
from nstcam.cam.result import CamResult, evaluate_maps
from nstcam.cam.targets import Target, is_target_object
from nstcam.cam.targets.found import cam_result, explain_found
from nstcam.cam.trust import Trusted
from nstcam.image import ImageSource, image_to_tensor, load_image, resize_long_side
from nstcam.layouts import input_grid
from nstcam.preprocess import Preprocess, preprocess_for
from nstcam.timm_zoo import build_timm, is_timm
from nstcam.weights import WeightsInfo, announce_weights, build_model, weights_info

__all__ = ["GradCAM"]

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only (3.10 runs too)

logger = logging.getLogger(__name__)


class GradCAM(SpaceTime, Trusted, LayerChoosing):
    """Class activation maps for a CNN classifier.

    The forward pass runs without autograd up to the target layer; a forward hook records that
    layer's output as a fresh leaf and a gradient hook on it receives d(score)/d(activation), so the
    backward pass stops at the target layer and costs little more than one forward pass. Parameters'
    ``.grad`` are never touched, and it works inside ``torch.no_grad()`` or ``torch.inference_mode()``.

    Thread safety: a call changes nothing that another call can see. Its hooks record only its own
    passes, and the model's training flags are never flipped (a model with modules in training mode
    is explained through an eval-mode twin that shares its tensors), so any number of threads may
    call one ``GradCAM``, or several ``GradCAM`` objects sharing one network, at once.

    Args:
        arch: a torchvision classifier of :data:`nstcam.cam.CAM_ARCHS` (ResNet, ViT, Swin, ConvNeXt,
            EfficientNet, MobileNetV3, DenseNet, RegNet, VGG-bn) or :data:`~nstcam.cam.VIDEO_ARCHS`
            (clips: :meth:`explain_video`); ``"timm:<name>"``, any model of
            timm's zoo (``pip install 'nstcam[timm]'``, :mod:`nstcam.timm_zoo`); or the model itself
            (an ``nn.Module``, as ``model=``).
        weights: ``"imagenet"`` (``"kinetics"``), ``"random"`` or a file (:func:`nstcam.build_model`);
            for timm, ``"pretrained"`` (timm's own), ``"random"`` or a path.
        target_layer: a name from ``model.named_modules()``, or several (their maps fused, see
            ``fuse``); None: the family's default (``layer4``, a ViT's last ``ln_1``...;
            :mod:`nstcam.cam.layers`); ``"auto"``: the one whose maps score best (``layer_images``).
        method: one of :data:`nstcam.cam.METHODS` (:data:`nstcam.cam.REGISTRY` says what each
            computes and costs). A method that cannot work on the model or layer (``"cam"`` without
            a pooled linear head, ``"legrad"`` on a CNN, guided backprop without ReLU modules) is
            refused here, with the reason and a method that works.
        device: where to run; default CUDA, else MPS, else CPU.
        model: any classifier ``nn.Module`` returning logits (N, classes); replaces ``arch``.
        input_size: images' shorter side in pixels; None: the official weights' crop size (224 for
            most); a ViT takes exactly its ``image_size`` square.
        scorecam_batch: masked (Score-CAM) or ablated (AblationCAM) images per forward pass.
        colormap: matplotlib colormap of overlays.
        alpha: opacity of the heatmap in overlays.
        layout: the target layer's activation layout, ``"nchw"``, ``"tokens"`` (ViT) or ``"nhwc"``
            (Swin); None reads it from the shape and refuses an ambiguous one (``nstcam/layouts.py``).
        cuda_graphs: replay gradient passes from CUDA graphs captured per input shape (see
            ``cam/_graphed.py``); default on for CUDA. They read the parameters in place: load new
            weights with ``load_state_dict``, never by replacing tensors.
        fuse: several layers' maps, each scaled at the input's size, made one by their ``"mean"``,
            ``"max"`` or ``"product"`` (RefineCAM).
        n_samples: samples of Smooth Grad-CAM++, SS-CAM, IS-CAM (None: 4, 35, 10); noise_std: their
            noise (``std=`` one number with one of them and no ``mean``: read as ``noise_std``, as before).
        seed: seeds a call's random numbers (RandomCAM, noise): reproducible, global state untouched.
        mean: the model's per-channel mean (RGB in [0, 1]); std: likewise; transform: its
            :class:`nstcam.Preprocess`, torchvision weights transform or timm data config (never its
            crop). Default: the model's own, else ImageNet's with a warning (:mod:`nstcam.preprocess`).
        frames: a video (or volume) model's window in frames (default 16); None for an image model.
        layer_images, layer_metric, layer_candidates: ``target_layer="auto"``'s photos, metric and
            layers (:func:`nstcam.cam.auto_layer.choose_layer`); its evidence: ``layer_choice``.
    """

    @shows_cam_options
    def __init__(
        self,
        arch: str | nn.Module = "resnet50",
        weights: str | Path = "imagenet",
        target_layer: str | Sequence[str] | None = None,
        method: str | None = None,
        device: torch.device | str | None = None,
        model: nn.Module | None = None,
        *,
        options: CamOptions | None = None,
        **changes: Unpack[CamChanges],
    ) -> None:
        given = {k: v for k, v in (("target_layer", target_layer), ("method", method)) if v is not None}
        o = self.options = CamOptions.of(options, **given, **changes)
        self.fuse, self.n_samples, self.noise_std, self.seed = o.fuse, o.n_samples, o.noise_std, o.seed
        self.scorecam_batch, self.alpha = o.scorecam_batch, o.alpha
        model = _model_of(arch, model, weights, o.seed)
        self.device = pick_device(device)
        self.model = _on_device(model, self.device)
        info = weights_info(model)
        self.arch = info.arch if info is not None else type(model).__name__
        self.kind = model_kind(self.model)  # "classifier", "segmenter" or "detector"
        self.frames = clip_frames(self.model, o.frames)  # None: an image model
        self.preprocessing = preprocess_for(
            self.model, mean=o.mean, std=o.std, transform=o.transform, warn=self.kind == "classifier"
        )
        self._read_layers(o.target_layer, o.layout, o.input_size, o.method, o.layer_candidates)
        self.method = o.method
        self.colormap = o.colormap
        self.weights = weights_info(model)
        self.categories = _categories(self.weights, self.kind, video=self.frames is not None)
        self._graphs = _graphs_for(self.device, o.cuda_graphs)
        self._num_classes: int | None = None
        announce_weights(self.model)  # once per model, however many engines share it
        self._choose_layer(
            o.target_layer, o.layout, o.input_size, o.layer_images, o.layer_metric, o.layer_candidates
        )

    # -- public API ---------------------------------------------------------------------------
    def explain(
        self,
        image: ImageSource,
        target: int | Target | None = None,
        top_k: int | None = None,
        *,
        classes: Sequence[int | str] | None = None,
        score_threshold: float = 0.5,
        max_detections: int = 5,
        max_side: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        evaluate: bool = False,
        evaluate_steps: int = 20,
        aug_smooth: bool = False,
        eigen_smooth: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[CamResult]:
        """Explains one image: a classifier's top classes or ``target``; a detector's detections, each
        with its ``box`` (``score``: the detection's); a segmenter's classes present, largest first
        without the background, each with its ``mask`` (``score``: its mean probability there).

        Args:
            image: anything :func:`nstcam.load_image` takes.
            classes: a detector's or segmenter's classes to explain (indices or names); score_threshold:
                a detector's least detection score kept; max_detections: how many.
            target: explain this class, not the top ones; or a target object of :mod:`nstcam.cam.targets`
                (a probability, a region, a similarity, any ``f(output, i)``): its score is ``score``.
            top_k: how many of the highest-scoring classes to explain (1; a segmenter: all present).
            max_side: heatmaps and overlays (and a detector's boxes) at the image's size, or with
                their long side capped at this many pixels (the network sees the same ``input_size``
                input either way): a 36 MP photo then costs what a 1 MP one does.
            progress: perturbation methods: ``progress(done, total)`` after each forward pass.
            evaluate: also measure how faithful each map is (:func:`nstcam.metrics.faithfulness`:
                confidence change, deletion and insertion AUC, ROAD, on the network's input) and
                what two maps with no information about the image score: a random map on the map's
                own grid and a centre blob; fills ``faithfulness``, ``baseline`` and ``centre``.
                Costs about ``6 * evaluate_steps + 66`` extra forward passes per class.
            evaluate_steps: points of the deletion and insertion curves, less one.
            aug_smooth: average the maps of six augmentations of the input (horizontal flip x
                brightness 0.9/1/1.1), de-augmented; the five extra run as one batch.
            eigen_smooth: the weighted activations' first principal component, not their sum.
            should_stop: asked before each masked pass and each of ``evaluate``'s passes (a cancel
                flag, a deadline): once true, :class:`nstcam.cam.StoppedEarly` there; None: never.

        Returns:
            One :class:`CamResult` per class, highest score first (or the single ``target``).
        """
        self.images_only()
        if self.kind != "classifier" and target is None:
            return explain_found(
                self,
                _loaded(image, max_side),
                top_k=top_k,
                classes=classes,
                score_threshold=score_threshold,
                max_detections=max_detections,
                eigen_smooth=eigen_smooth,
                aug_smooth=aug_smooth,
                evaluate=evaluate,
                progress=progress,
            )
        top_k = whole("top_k", 1 if top_k is None else top_k, minimum=1)
        target = _checked_target(target, evaluate)
        img = _loaded(image, max_side)
        steps = whole("evaluate_steps", evaluate_steps, minimum=1)
        return _explained(
            self,
            img,
            target,
            top_k,
            progress,
            steps if evaluate else None,
            aug_smooth,
            eigen_smooth,
            should_stop,
        )

    def compute(
        self,
        x: torch.Tensor,
        targets: int | Sequence[int] | torch.Tensor | Target | Sequence[Target] | None = None,
        *,
        raw: bool = False,
        progress: Callable[[int, int], None] | None = None,
        aug_smooth: bool = False,
        eigen_smooth: bool = False,
    ) -> torch.Tensor:
        """Maps for an already normalised batch ``x``: images (N, 3, H, W), or for a video or volume
        model (:attr:`frames` set) clips or volumes (N, C, T, H, W).

        Args:
            x: the batch, normalised as the model takes it (:meth:`preprocess`, ``cam.preprocessing``).
            targets: None for each image's top-1 class, one class for all, or one class per image; or
                target objects (:mod:`nstcam.cam.targets`), one for all or one per image: ``ClassTarget``,
                ``BinaryTarget``, ``RegionTarget`` (a segmenter), ``SimilarityTarget`` or any callable
                ``f(output, i) -> scalar``; a target that does not fit the model's output is refused.
            raw: return the maps at the layer's resolution (ReLU only) instead.
            progress: Score-CAM and AblationCAM: called as ``progress(done, total)`` after each forward pass.
            aug_smooth: see :meth:`explain`; eigen_smooth: likewise.

        Returns:
            (N, [T,] H, W) maps in [0, 1] at the input's size (or (N, [t,] h, w) raw maps: at the layer's
            resolution, or the input's for several layers, ``aug_smooth``, FullGrad, guided backprop).
        """
        check_batch(x, self.frames is not None, aug_smooth)
        maps, raws, _, _ = _run(
            self,
            x.to(self.device),
            targets=targets,
            out_size=input_grid(x),
            progress=progress,
            aug_smooth=aug_smooth,
            eigen_smooth=eigen_smooth,
        )
        return raws[0] if raw else maps[0]

    def preprocess(self, img: Image.Image) -> torch.Tensor:
        """Resizes (shorter side to ``input_size``; a fixed-size model's exact square) and normalises
        one image into a (1, 3, H, W) batch; a detector's as it is (it does both inside itself)."""
        return _batch(img, self.kind, self.input_size, self.square, self.device, self.preprocessing)

    def label(self, index: int) -> str:
        """The name of class ``index``."""
        return self.categories[index] if 0 <= index < len(self.categories) else f"class {index}"

    @property
    def layers(self) -> list[str]:
        """Layers of the model that make sense as targets."""
        return candidate_layers(self.model)

    graph_stats = property(lambda self: graph_stats(self._graphs), doc=graph_stats.__doc__)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(arch={self.arch!r}, target_layer={self.target_layer!r}, "
            f"method={self.method!r}, device={str(self.device)!r})"
        )


def _explained(
    cam: GradCAM,
    img: Image.Image,
    target: Any,
    top_k: int,
    progress: Callable[[int, int], None] | None,
    evaluate_steps: int | None,
    aug_smooth: bool,
    eigen_smooth: bool,
    should_stop: Callable[[], bool] | None,
) -> list[CamResult]:
    """A classifier's (or a target's) explanation of one loaded image (:meth:`GradCAM.explain`); with
    ``evaluate_steps``, its faithfulness too; every pass first asks ``should_stop``."""
    watch = PassWatch(should_stop, what="the explanation")
    if should_stop is not None:
        progress = watch.progress_of(progress)
    x = cam.preprocess(img)
    maps, raw, probs, classes = _run(
        cam,
        x,
        targets=target,
        top_k=top_k,
        out_size=(img.height, img.width),
        progress=progress,
        aug_smooth=aug_smooth,
        eigen_smooth=eigen_smooth,
    )
    chosen = [int(c) for c in classes[0]]
    model = watch.model(cam.model) if should_stop is not None else cam.model
    scores = evaluate_maps(model, x, raw, chosen, evaluate_steps) if evaluate_steps else None
    return _results(cam, img, target, maps, raw, probs, classes[0], scores)


def _run(
    cam: GradCAM,
    x: torch.Tensor,
    *,
    targets: Any = None,
    top_k: int = 1,
    out_size: tuple[int, ...],
    progress: Callable[[int, int], None] | None = None,
    aug_smooth: bool = False,
    eigen_smooth: bool = False,
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """(maps at ``out_size``, raw maps, probabilities, classes) of the batch ``x``: class indices
    through the method's pass (or its CUDA graph), target objects through the target path."""
    objects, targets = split_targets(targets, x.shape[0], cam.method)
    if objects is not None:  # target objects: any output, one target per image
        x = x.clone() if x.is_inference() else x
        raws, scores = explain_targets(
            Spec.of(cam), eval_view(cam.model), x, objects, aug_smooth, eigen_smooth, progress
        )
        return [upsample_maps(raws, out_size)], [raws], scores[:, None], torch.zeros(x.shape[0], 1).long()
    spec = Spec.of(cam)
    x = x.clone() if x.is_inference() else x
    raws, probs, classes = raw_maps(
        spec, eval_view(cam.model), x, targets, top_k, progress, aug_smooth, eigen_smooth
    )
    cam._num_classes = probs.shape[1]
    maps = [upsample_maps(r, out_size) for r in raws]
    return maps, list(raws), probs, classes.T.cpu()


def _model_of(arch: Any, model: Any, weights: str | Path, seed: int) -> nn.Module:
    """The model given (as ``arch`` or ``model=``, once), else the one ``arch`` names, built."""
    if isinstance(arch, nn.Module):
        if model is not None:
            raise ValueError("give the model once: as arch (the first argument) or as model=")
        model = arch
    return _built(arch, weights, seed) if model is None else _checked_model(model)


def _built(arch: str, weights: str | Path, seed: int) -> nn.Module:
    """The registered model ``arch`` (or timm's ``"timm:<name>"``) with ``weights``; anything else
    refused with the known names (never printing what was given, which may be a whole model)."""
    if is_timm(arch):
        return build_timm(arch, "pretrained" if weights == "imagenet" else weights, seed=seed)
    every = (*CAM_ARCHS, *SEGMENTER_ARCHS, *DETECTOR_ARCHS, *VIDEO_ARCHS)
    if not isinstance(arch, str) or arch not in every:
        close = closest(arch, every, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        given = repr(arch[:60]) if isinstance(arch, str) else f"a {type(arch).__name__}"
        raise ValueError(
            f"arch must be one of the names in nstcam.cam.CAM_ARCHS, SEGMENTER_ARCHS, DETECTOR_ARCHS or "
            f"VIDEO_ARCHS ({len(every)} models: resnet50, vit_b_16, deeplabv3_resnet50, "
            f"fasterrcnn_resnet50_fpn, r3d_18...), 'timm:<name>', or a model{hint}; got {given}"
        )
    return build_model(arch, weights)


def _checked_model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got a {type(model).__name__}")
    return model


def _graphs_for(device: torch.device, cuda_graphs: bool | None) -> CamGraphs | None:
    """The engine's CUDA graphs (on for CUDA unless ``cuda_graphs=False``), or None where it runs eagerly."""
    if cuda_graphs and device.type != "cuda":
        raise ValueError(
            f"cuda_graphs=True needs a CUDA device; this engine runs on {device}: leave "
            "cuda_graphs unset (on for CUDA only)"
        )
    use = device.type == "cuda" if cuda_graphs is None else cuda_graphs
    return CamGraphs() if use else None


def _loaded(image: ImageSource, max_side: int | None) -> Image.Image:
    if max_side is not None:
        max_side = whole("max_side", max_side, minimum=16)
    img = load_image(image)
    return resize_long_side(img, max_side) if max_side is not None and max(img.size) > max_side else img


def _batch(
    img: Image.Image,
    kind: str,
    input_size: int,
    square: int | None,
    device: torch.device,
    pre: Preprocess,
) -> torch.Tensor:
    if kind == "detector":
        return image_to_tensor(img, device)
    w, h = img.size
    s = input_size / min(w, h)
    size = (square,) * 2 if square else (max(1, round(w * s)), max(1, round(h * s)))
    return pre.normalize(image_to_tensor(img.resize(size, pre.resample), device))


def _checked_target(target: Any, evaluate: bool) -> Any:
    if target is None or not is_target_object(target):
        return None if target is None else whole("target", target, minimum=0)
    if evaluate:
        raise ValueError("evaluate measures a class's probability: leave it off with a target object")
    return target


def _results(
    cam: GradCAM, img: Image.Image, target: Any, maps, raw, probs, classes, scores
) -> list[CamResult]:
    """One :class:`CamResult` per class explained for the image (or the target object's one)."""
    named = _target_name(target, cam.label) if is_target_object(target) else None
    return [
        cam_result(
            cam,
            img,
            maps[j][0],
            raw[j][0],
            int(cls) if named is None else named[0],
            float(probs[0, cls]),
            label=None if named is None else named[1],
            faithfulness=scores[j][0] if scores else None,
            baseline=scores[j][1] if scores else None,
            centre=scores[j][2] if scores else None,
        )
        for j, cls in enumerate(classes)
    ]


def _target_name(target: Any, label: Callable[[int], str]) -> tuple[int, str]:
    """(class index or -1, label) of a target object, for its result."""
    index = getattr(target, "index", getattr(target, "label", None))
    if isinstance(index, int):
        return index, f"{type(target).__name__}: {label(index)}"
    return -1, type(target).__name__ if hasattr(target, "kind") else "custom target"


def _categories(info: WeightsInfo | None, kind: str = "classifier", video: bool = False) -> list[str]:
    """Class names: the weights' own, else those of the kind's official weights (a custom model:
    ImageNet's for a classifier, its indices past 999 say so; COCO's for a detector, VOC's for a
    segmenter)."""
    if info is not None:
        return list(info.categories)
    if video:  # a custom video model: Kinetics-400's actions, its indices past 399 say so
        return list(VIDEO_ARCHS["r3d_18"][1].meta["categories"])
    from torchvision.models import ResNet50_Weights
    from torchvision.models.detection import FasterRCNN_ResNet50_FPN_Weights
    from torchvision.models.segmentation import FCN_ResNet50_Weights

    official = {"detector": FasterRCNN_ResNet50_FPN_Weights, "segmenter": FCN_ResNet50_Weights}
    return list(official.get(kind, ResNet50_Weights).DEFAULT.meta["categories"])


def _on_device(model: nn.Module, device: torch.device) -> nn.Module:
    """Moves ``model`` only if some tensor is elsewhere: a model shared with running calls is not
    touched (``.to`` reassigns every parameter's data even when nothing moves)."""

    def elsewhere(t: torch.Tensor) -> bool:
        return t.device.type != device.type or (device.index is not None and t.device != device)

    if any(elsewhere(t) for t in itertools.chain(model.parameters(), model.buffers())):
        model.to(device)
    return model
