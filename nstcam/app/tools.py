"""What each endpoint says about itself: the API docs and, with ``python app.py --mcp``, the
description an AI agent reads of each Model Context Protocol tool.

Gradio builds a tool from the endpoint function's docstring (a paragraph, then ``Args:`` with one
``name: description`` line per parameter, then ``Returns:``) and its type hints. The limits in them
are this server's (:class:`AppConfig`), so the docstrings are written per app, here.
"""

from __future__ import annotations

from nstcam.app.config import AppConfig
from nstcam.cam import METHOD_INFO, METHODS, PERTURBATION_METHODS, REGISTRY, TARGET_METHODS
from nstcam.cam.layers import DETECTOR_ARCHS, SEGMENTER_ARCHS
from nstcam.style.losses import REGISTRY as STYLE_LOSSES

__all__ = ["TOOL_DOCS", "tool_doc"]

_IMAGE = "an image as an http(s) URL or a data: URL (PNG, JPEG, WebP...; at most {upload} MB, 40 megapixels)"

TOOL_DOCS: dict[str, str] = {
    "stylize_video": """Video style transfer without flicker (Ruder et al. 2016): every frame of the clip repainted
in the style, each started from the previous stylised frame warped by the optical flow and held to
it where the motion is certain. Costs about `steps` network evaluations per frame ({cost}).
Clips longer than {video_seconds:g} s or over {video_pixels:,} frame pixels (frames x width x height at
`size`) are refused unless `trim` is true. Results from random weights are labelled as such.

Args:
    video: the clip (mp4, webm, mov, mkv or GIF; at most {upload} MB) as an http(s) URL or a data: URL.
    style: the painting or texture whose style is transferred: {image}.
    size: long side of the frames in px, 64 to {max_size}.
    steps: optimisation steps per frame, 1 to {max_steps}.
    temporal_weight: weight of the temporal loss, 0 to 10000 (default 50; 0: every frame alone, flickers).
    max_seconds: stylise at most this many seconds from the start (0: the server's limit).
    trim: true: a clip over the limits is cut to what fits; false: it is refused with the limits.
    seed: random seed, >= 0.

Returns:
    preview: the last frame stylised.
    status: "done: N frames ... warping error E" (lower is steadier), or why it stopped.
    result_video: the stylised clip (H.264 mp4, the input's frame rate and audio).
    download_mp4: the same clip as a file to download.
""",
    "stylize": """Neural style transfer (Gatys et al., VGG16_bn): repaints the content image in the colours
and brush strokes of the style image while keeping its layout. Each step is a forward and backward
pass of VGG16_bn; on this {device} server: {cost}. Results from random weights are labelled as such.

Args:
    content: the photo to repaint: {image}.
    style: the painting or texture whose style is transferred: {image}.
    style_b: optional second style, blended in by `blend`: {image}; or null.
    blend: weight of style_b, 0 to 1 (0: style only).
    size: long side of the result in px, 64 to {max_size}.
    steps: optimisation steps (network evaluations), 1 to {max_steps}; more is closer to the style.
    style_weight: strength of the style, >= 0 (default 50).
    content_weight: strength of the content's layout, >= 0 (default 1).
    tv_weight: smoothness (total variation), >= 0 (default 5).
    preserve_color: "off", "luminance" (keep the photo's colours) or "histogram" (recolour the style first).
    seed: random seed, >= 0; the same inputs and seed give the same image.
    optimizer: "lbfgs" (default, fewer steps) or "adam".
    tile: 0, or a tile size in px (64 to {max_size}) to optimise big outputs window by window.
    style_loss: {style_losses}.
    init: where the optimisation starts: "content" (default), "noise", "style", or "style_stats" (noise with the style's colour mean and covariance).
    average: 0 (default, off), or a decay below 1 such as 0.99: the result is the moving average of the steps' images (less pixel noise).
    mask_a: optional region of style (an image editor value {{"background": image, "layers": [images]}}): strokes painted on its layers (their alpha), else the background as a black and white mask (white = styled); any size. With style_b, each style keeps its own region and a style without a mask takes the rest (blend is not used); with style alone, where it goes. Elsewhere the content is kept. Or null.
    mask_b: style_b's region, as mask_a; or null.

Returns:
    result: the stylised image (PNG).
    status: "done: WxH, N steps in S s" (or why it stopped), with a note when the weights are random.
    download_png: the same PNG as a file to download.
""",
    "gradcam": """Grad-CAM saliency: which pixels made a model decide. A classifier (ResNet, ViT, Swin...): each of its
top classes for the image. A detector: each object it found, its box drawn. A segmenter: each class
it found (or the classes asked), its predicted pixels outlined. Returns one heatmap overlay per
result with its label and score. Costs about one forward pass per result (Score-CAM: one per channel
of the layer, at most {scorecam} masked images per request here).

Args:
    image: the photo to explain: {image}.
    model: one of {explain_archs} (default resnet50); detectors: {detectors}; segmenters: {segmenters}.
    layer: the layer the map is read at; empty (default): the model's own default (ResNets "layer4", ViT its last block's "ln_1", Swin its last "norm2", a detector its FPN's levels "backbone"); or a stage or block such as "layer3" or "layer3.1".
    method: one of {methods} (default gradcam). Gradient methods cost about one forward pass per class; the perturbation ones ({perturbation}) one per channel ({samples}); fullgrad and guided-backprop a whole backward pass; cam needs a pooled linear head (ResNets' layer4), legrad a ViT; a method that cannot work on the model says why. Detectors and segmenters take {target_methods}.
    top_k: how many of the top classes to explain, 1 to 10 (a segmenter: its largest classes present; a detector: not used).
    aug_smooth: average the maps of 6 augmentations of the photo (flip x brightness): less noise, 6 times the cost (default false; classifiers only).
    eigen_smooth: the first principal component of the weighted activations instead of their sum (default false).
    classes: a detector's or segmenter's class names to explain, at most 20, each once; empty (default): all it found. Detectors take COCO's 80 names ("airplane", "dining table", "motorcycle", "potted plant", "couch", "tv"...), segmenters Pascal VOC's 20 ("aeroplane", "diningtable", "motorbike", "pottedplant", "sofa", "tvmonitor"...); a name the model does not know is refused with its list. A classifier takes none (it explains its top_k classes).
    score_threshold: a detector's least detection score kept, 0 to 1 (default 0.5).
    max_detections: how many of a detector's detections to explain, 1 to 10 (default 5).

Returns:
    overlays: one image per result, the heatmap over the photo, captioned "label · p=probability" (a detection: "label · score=... · box (x0, y0, x1, y1)"; a segmenter's class: also its share of the image).
    heatmap: the first result's heatmap alone (greyscale, white = most relevant).
    top_classes: a table of rank, class index, label (a detection's with its box) and probability (a detection's score).
""",
    "faithfulness": """How faithful is a Grad-CAM map? Perturbs the photo by the top class's map and watches the
class probability (confidence change, deletion and insertion AUC, ROAD), beside the same figures for
a random map: a map whose figures are near the random map's explains little. Costs {passes}
forward passes.

Args:
    image: the photo: {image}.
    model: the classifier, one of {archs} (default resnet50).
    layer: the layer the map is read at; empty (default): the model's default.
    method: one of {methods} (default gradcam).
    aug_smooth: average the maps of 6 augmentations of the photo (default false).
    eigen_smooth: the first principal component of the weighted activations (default false).

Returns:
    faithfulness: a table of metric, this map, random map and which direction is better.
    curves: a plot of the deletion and insertion curves of both maps.
    verdict: a sentence: on how many of the 4 metrics the map beats a random one.
""",
    "subject_aware": """Style transfer around the subject: Grad-CAM finds what the classifier recognises (the cat, the
cup), then the style is painted on the background only (or on the subject only), and a report says
whether the classifier still recognises the subject afterwards. Costs about as much as stylize.

Args:
    content: the photo: {image}.
    style: the painting or texture: {image}.
    mode: "background" (default: style everything but the subject) or "subject" (style only it).
    threshold: saliency above which a pixel is the subject, 0 to 1 (default 0.4).
    feather: soft edge of the mask in px, 0 to 64 (default 8).
    size: long side of the result in px, 64 to {max_size}.
    steps: optimisation steps, 1 to {max_steps}.
    model: the classifier that finds the subject, one of {archs} (default resnet50).

Returns:
    mask: the style mask (white = styled, black = content kept).
    result: the stylised image (PNG).
    before: the classifier's top-3 overlays on the photo.
    after: its top-3 overlays on the result.
    report: markdown: top class before and after, its probability, and the IoU of the two maps.
    status: "done: ..." or why it stopped.
""",
    "features": """What the network sees: the activations of one layer of VGG16_bn or a ResNet for the image, as
a grid of its most active channels (forward pass stopped at that layer).

Args:
    image: the photo: {image}.
    model: "vgg16_bn" or one of {archs}.
    layer: empty (default): the model's own (vgg16_bn "relu3_1", a classifier its Grad-CAM layer, e.g. a ResNet's "layer4"); for vgg16_bn a ReLU such as "relu1_1" ... "relu5_3"; for a classifier one of its layers, e.g. "layer3" or "layer3.1" (a wrong name is answered with the valid ones).
    top: how many channels to show, 1 to 64.

Returns:
    grid: the channels' activation maps, each labelled "#channel  mean activation".
    summary: the layer's channel count and map size, and whether the weights are random.
    channels: a table of rank, channel index and mean activation.
""",
}


def tool_doc(name: str, config: AppConfig) -> str:
    """The docstring of endpoint ``name`` with this server's limits filled in."""
    on_gpu = config.torch_device.type != "cpu"
    steps = 20 if config.torch_device.type == "cuda" else 10
    fields = {
        "device": config.torch_device.type.upper(),
        "cost": "far faster than on a CPU" if on_gpu else "slow, so prefer small sizes and steps",
        "upload": f"{config.max_upload_mb:g}",
        "max_size": config.max_size,
        "max_steps": config.max_steps,
        "scorecam": config.scorecam_budget,
        "archs": ", ".join(config.cam_archs),
        "methods": ", ".join(METHODS),
        "explain_archs": ", ".join(config.explain_archs),
        "detectors": ", ".join(a for a in config.found_archs if a in DETECTOR_ARCHS),
        "segmenters": ", ".join(a for a in config.found_archs if a in SEGMENTER_ARCHS),
        "target_methods": ", ".join(TARGET_METHODS),
        "style_losses": "; ".join(f'"{name}" ({loss.summary})' for name, loss in STYLE_LOSSES.items()),
        "perturbation": ", ".join(PERTURBATION_METHODS),
        "samples": "; ".join(
            f"{m}: times {REGISTRY[m].samples} samples"
            for m in PERTURBATION_METHODS
            if REGISTRY[m].samples > 1
        ),
        "passes": f"about {4 * steps + 44}",
        "video_seconds": config.max_video_seconds,
        "video_pixels": config.max_video_pixels,
    }
    fields["image"] = _IMAGE.format(**fields)
    return TOOL_DOCS[name].format(**fields)


_FAMILIES = {
    "gradient": "Gradient",
    "gradient-free": "Gradient-free",
    "perturbation": "Perturbation",
    "other": "Whole network",
}


def method_choices() -> list[tuple[str, str]]:
    """The Grad-CAM methods as (label, value), grouped by family in the catalogue's order."""
    order = list(_FAMILIES)
    items = sorted(METHOD_INFO.items(), key=lambda kv: order.index(kv[1].family))
    return [(f"{_FAMILIES[info.family]} · {name}", name) for name, info in items]


def method_note(method: str) -> str:
    """One line under the method menu: what it computes and what it costs."""
    info = METHOD_INFO.get(method)
    return f"{info.summary}; costs {info.cost} ({info.paper})" if info else ""
