"""What a request will cost, estimated before any work and checked against this server's limits:
one estimator per endpoint, read through :func:`request_cost`.

A request's cost is counted in the unit that bounds its time and memory:

- a style request's in pixel-steps (its size squared x its steps; each is in range first);
- a learning request's in pixel-steps too (its crops' side squared x its steps x its batch), its
  limit the server's minutes of work at a 2-core CPU's measured rate;
- a stylised video's in frame pixels at the size asked (frames x width x height);
- a Grad-CAM request's in masked images (a perturbation method scores one per channel and class,
  SS-CAM and IS-CAM one per sample too, augmentation 6 times; a gradient method none), the
  faithfulness panel's its map's plus its curves' (``6 * steps + 66``);
- a trust report's in forward passes (:func:`nstcam.cam.trust.trust_passes`: each method's maps,
  a gradient one's a forward and a backward, Score-CAM and co.'s their masked images too, and the
  metrics' perturbed images);
- a feature-map request's in forward passes (one, stopped at the layer);
- a clip's in windows planned (from its decoded frame count, never its declared duration: a clip of
  one frame per timebase tick packs 10,000 frames in 10 s);
- a volume's in voxel-passes (passes x voxels of its one window, the whole volume), each side of a
  volume at most twice the side of the largest cube (on a CPU a side of 512 or more took 2.1-2.2x
  the time and 1.7x the memory of a 64**3 cube of as many voxels, sides up to 256 1.0-1.3x:
  ``tests/benchmarks/bench_volume_shapes.py``, docs/security.md).

A refusal is one line: the request, its cost, the limit and what would fit. docs/security.md's
"What one request may cost" table lists every endpoint's estimator (a test holds them equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from nstcam._choices import Registry
from nstcam.app.config import AppConfig
from nstcam.app.errors import refuse
from nstcam.app.guard.checks import check
from nstcam.app.guard.shapes import kpca_passes, layer_positions, pass_factor, widest_factor
from nstcam.app.layers import meta_layers
from nstcam.cam import PERTURBATION_METHODS, REGISTRY, arch_kind
from nstcam.cam.clips import window_starts
from nstcam.cam.trust import CORRELATION_SAMPLES, maps_per_image, trust_passes
from nstcam.fast import REFERENCE_AREA, SAMPLE_PHOTOS

__all__ = [
    "ESTIMATES",
    "Cost",
    "cam_cost",
    "clip_cost",
    "faithfulness_cost",
    "faithfulness_curves",
    "faithfulness_steps",
    "features_cost",
    "learn_cost",
    "max_volume_side",
    "request_cost",
    "style_cost",
    "style_pixel_steps",
    "trust_cost",
    "trust_settings",
    "video_cost",
    "volume_cost",
    "volume_passes",
]


@dataclass(frozen=True)
class Cost:
    """A request's estimated cost.

    Attributes:
        what: how the refusal names the request (its file's own name, its settings).
        units: its cost; limit: the most this server takes; unit: what is counted.
        fix: what would make it fit.
        where: whose limit it is (``this CPU server``).
    """

    what: str
    units: float
    limit: float
    unit: str
    fix: str = ""
    where: str = "this server"

    def check(self) -> Cost:
        """Refuses the request (one line) over its limit; returns itself otherwise."""
        if self.units > self.limit:
            fix = f" {self.fix}" if self.fix else ""
            raise refuse(
                f"{self.what} would cost {self.units:,.0f} {self.unit}, over {self.where}'s limit of "
                f"{self.limit:,.0f}.{fix}"
            )
        return self


def style_pixel_steps(size: int, steps: int) -> float:
    """A ``size`` px square's pixels times each scale's steps, summed, when ``steps`` in all are
    shared over the default scales (:func:`nstcam.style.options.split_steps`: what the app runs)."""
    from nstcam.style.options import split_steps

    scales, per_scale = split_steps(int(size), max(1, int(steps)))
    return float(sum(side**2 * n for side, n in zip(scales, per_scale, strict=True)))


def _server(cfg: AppConfig) -> str:
    return f"this {cfg.torch_device.type.upper()} server"


def style_cost(cfg: AppConfig, size: float | None, steps: float | None) -> Cost:
    """A style request's pixel-steps (:func:`style_pixel_steps`: ``side**2`` times each scale's share
    of ``steps``, a square at most, the long side being ``size``), its size and steps each in range
    first (``/stylize``, ``/subject_aware``)."""
    check(size, "size", 64, cfg.max_size)
    check(steps, "steps", 1, cfg.max_steps)
    return Cost(
        f"a style request of {size:g} px and {steps:g} steps",
        style_pixel_steps(int(size), int(steps)),
        style_pixel_steps(cfg.max_size, cfg.max_steps),
        "pixel-steps",
        "Use a smaller size or fewer steps.",
        _server(cfg),
    )


STYLE_SECONDS_PER_PIXEL_STEP = {"cpu": 6.5e-6}
"""One evaluation of VGG16_bn (forward and backward) per output pixel on this project's 2-core CPU,
end to end through the handler (``bench_estimate.py``, docs/benchmarks.md); not measured on a GPU."""
STYLE_SETUP_SECONDS = {"cpu": 0.3}
"""What a run costs before its first step and after its last (the style's targets, the fast start,
the result's file), whatever its steps: ``bench_estimate.py``'s fit on this project's 2-core CPU
(six runs from 5 steps at 128 px to 100 at 384 px, each within 8 % of the fit; the server's first
run after start builds the network too, 1.8 s more)."""
LEARN_SECONDS_PER_PIXEL_STEP = 1.87e-5
"""One learning step (the arbitrary network and VGG16's forward and backward) per crop pixel on this
project's 2-core CPU: 10 minutes ran 241-254 steps of two 256 px crops (``bench_learn.py``,
docs/style.md), 2.45 s a step."""
MAX_LEARN_STEPS = 5000
MAX_LEARN_BATCH = 8


def learn_cost(
    cfg: AppConfig, size: float | None, steps: float | None, batch: float | None, photos: int | None = None
) -> Cost:
    """A learning request's pixel-steps (``/learn_style``): its crops' side squared x its steps x its
    batch, each in range first, plus the content margin's one look at each of its ``photos`` (None:
    the bundled ones; a forward pass, a third of a step, of at most ``REFERENCE_AREA`` crops'
    pixels); the limit is :attr:`AppConfig.max_learn_minutes` of a 2-core CPU's work
    (:data:`LEARN_SECONDS_PER_PIXEL_STEP`; 10 minutes is about 245 steps of two 256 px crops)."""
    check(size, "size", 64, min(1024, cfg.max_size))
    check(steps, "steps", 1, MAX_LEARN_STEPS)
    check(batch, "batch", 1, MAX_LEARN_BATCH)
    looks = len(SAMPLE_PHOTOS) if photos is None else int(photos)
    minutes = cfg.max_learn_minutes
    limit = minutes * 60 / LEARN_SECONDS_PER_PIXEL_STEP
    most = learn_steps_that_fit(cfg, size, batch, photos)
    fewer = f"Use at most {most} steps at {size:g} px with {batch:g} crops a step" if most else "Use"
    return Cost(
        f"learning a style at {size:g} px for {steps:g} steps of {batch:g} crops",
        float(size) ** 2 * (float(steps) * float(batch) + looks * REFERENCE_AREA / 3),
        limit,
        f"pixel-steps ({minutes:g} minutes of a 2-core CPU's work is the limit)",
        f"{fewer}{',' if most else ''} a smaller size or a smaller batch.",
        _server(cfg),
    )


def learn_steps_that_fit(cfg: AppConfig, size: float, batch: float, photos: int | None = None) -> int:
    """The most steps a learning request at ``size`` px with ``batch`` crops a step (and ``photos``
    photos; None: the bundled ones) may ask for on this server (0: none fits), at most
    :data:`MAX_LEARN_STEPS`."""
    looks = len(SAMPLE_PHOTOS) if photos is None else int(photos)
    limit = cfg.max_learn_minutes * 60 / LEARN_SECONDS_PER_PIXEL_STEP
    fit = (limit / float(size) ** 2 - looks * REFERENCE_AREA / 3) / float(batch)
    return int(min(MAX_LEARN_STEPS, max(0.0, math.floor(fit))))


def video_cost(cfg: AppConfig, name: str, frames: int, width: int, height: int, fast: bool = False) -> Cost:
    """A video request's frame pixels: ``frames`` frames of ``width`` x ``height`` at the size asked
    (``/stylize_video``; :func:`nstcam.video.check_limits` trims to this limit first, where asked);
    the fast mode (one pass a frame) may take :data:`FAST_VIDEO_FACTOR` times
    the server's frame pixels."""
    return Cost(
        f"{name}: {frames:,} frames of {width}x{height} px",
        frames * width * height,
        cfg.max_video_pixels * (FAST_VIDEO_FACTOR if fast else 1),
        "frame pixels",
        "Use a smaller size, or tick Trim to stylise the start of the clip.",
        _server(cfg),
    )


def cam_cost(
    cfg: AppConfig,
    arch: str,
    layer: str,
    top_k: int,
    method: str = "gradcam",
    aug_smooth: bool = False,
    extra: int = 0,
    extra_for: str = "more",
    image_size: tuple[int, int] | None = None,
) -> Cost:
    """A Grad-CAM request's masked images (``/gradcam``): a perturbation method on a classifier
    scores one per channel of ``layer`` and class (SS-CAM and IS-CAM: per sample too; augmentation:
    6 times); KPCA-CAM its eigensolve (:func:`nstcam.app.guard.shapes.kpca_passes`); another gradient method
    none; ``extra`` more, ``extra_for`` what (the faithfulness curves). Each masked image counts as
    many photos as an image of ``image_size`` (its header's width, height) holds at the network
    (:func:`nstcam.app.guard.shapes.pass_factor`). Over the limit, the fix names only what would fit."""
    where = _server(cfg)
    factor = pass_factor(arch, image_size) if arch_kind(arch) == "classifier" else 1.0
    shape = f" at {image_size[0]}x{image_size[1]} px" if image_size and factor > 1 else ""
    if method == "kpcacam" and arch_kind(arch) == "classifier":
        return _kpca_cost(cfg, arch, layer, extra, extra_for, image_size, factor)
    if method not in PERTURBATION_METHODS or arch_kind(arch) != "classifier":
        return Cost(
            f"{method} on {arch} {layer}{shape}",
            extra * factor,
            cfg.scorecam_budget,
            "masked images",
            where=where,
        )
    per_channel = REGISTRY[method].samples * (6 if aug_smooth else 1)
    images = {name: c * per_channel for name, c in meta_layers(arch).items()}  # per class, by layer
    each = f"{per_channel} per channel and class" if per_channel > 1 else "one per channel and class"
    what = f"{REGISTRY[method].title} on {arch} {layer} ({images[layer] // per_channel} channels){shape}"
    budget = int(cfg.scorecam_budget / factor)
    fixes = _cam_fixes(images, layer, top_k, budget - extra, aug_smooth)
    thin = f"; each counts {factor:.2g} photos, the image's pixels at the network" if factor > 1 else ""
    return Cost(
        f"{what} with top-k {top_k}",
        math.ceil((images[layer] * top_k + extra) * factor),
        cfg.scorecam_budget,
        f"masked images ({each}{f'; {extra} {extra_for}' if extra else ''}{thin})",
        f"Use {'; or '.join(fixes)}.",
        where,
    )


def _kpca_cost(
    cfg: AppConfig,
    arch: str,
    layer: str,
    extra: int,
    extra_for: str,
    image_size: tuple[int, int] | None,
    factor: float,
) -> Cost:
    """KPCA-CAM's eigensolve of ``layer``'s positions, in forward passes (one map serves every
    class), plus ``extra`` masked images at ``factor`` photos each."""
    eig = kpca_passes(arch, layer, image_size)
    later = [
        name
        for name in meta_layers(arch)
        if kpca_passes(arch, name, image_size) + extra * factor <= cfg.scorecam_budget
    ]
    fit = f"a later layer with fewer positions (e.g. {', '.join(later[-3:])}); or " if later else ""
    return Cost(
        f"KPCA-CAM on {arch} {layer}",
        math.ceil(eig + extra * factor),
        cfg.scorecam_budget,
        f"masked images' worth of work (its eigensolve of {layer_positions(arch, layer, image_size):,} "
        f"positions: {eig:,}{f'; {extra} {extra_for}' if extra else ''})",
        f"Use {fit}another method (each costs about one forward pass).",
        _server(cfg),
    )


def _cam_fixes(images: dict[str, int], layer: str, top_k: int, budget: int, aug_smooth: bool) -> list[str]:
    """What would fit a perturbation method's budget, ``images`` its masked images per class by
    layer: a smaller top-k, an earlier layer, another method; never advice that does not fit."""
    fixes = ["no augmentation smoothing (it costs 6 times)"] if aug_smooth else []
    fits = budget // images[layer]  # top-k that would fit at this layer
    if fits >= 1:
        fixes.append(f"top-k {fits}" if fits == 1 else f"top-k {fits} or less")
    smaller = [name for name, c in images.items() if c * top_k <= budget]
    if smaller:
        fixes.append(f"an earlier layer with fewer channels (e.g. {', '.join(smaller[-3:])})")
    return [*fixes, "another method (each costs about one forward pass)"]


def faithfulness_steps(cfg: AppConfig) -> int:
    """Points of the faithfulness curves, less one: 10 on a CPU, 20 on a GPU."""
    return 20 if cfg.torch_device.type == "cuda" else 10


def faithfulness_curves(cfg: AppConfig) -> int:
    """Masked images the faithfulness curves of three maps cost: ``6 * steps + 66``."""
    return 6 * faithfulness_steps(cfg) + 66


def faithfulness_cost(
    cfg: AppConfig,
    arch: str,
    layer: str,
    top_k: int = 1,
    method: str = "gradcam",
    aug_smooth: bool = False,
    image_size: tuple[int, int] | None = None,
) -> Cost:
    """The faithfulness panel's masked images (``/faithfulness``; ``top_k`` is 1 there): the top
    class's map's (:func:`cam_cost`) plus the curves' of three maps, ``6 * steps + 66``, each at the
    image's pixels (``image_size``)."""
    curves = faithfulness_curves(cfg)
    cost = cam_cost(cfg, arch, layer, top_k, method, aug_smooth, curves, "for the curves", image_size)
    return Cost(f"the faithfulness of {cost.what}", cost.units, cost.limit, cost.unit, cost.fix, cost.where)


FAST_VIDEO_FACTOR = 20
"""How many times the frame pixels a clip may cost in the fast mode: one forward pass a frame, against
the optimisation's steps (50 by default) of a forward and a backward each."""

MAX_TRUST_METHODS = 8
"""Most methods one trust report may compare."""


def trust_settings(cfg: AppConfig) -> dict[str, int]:
    """The trust report's settings on this server (:func:`nstcam.cam.trust.trust`): the curves' points
    as the faithfulness panel's, 30 correlation subsets, 3 noisy copies."""
    return {"steps": faithfulness_steps(cfg), "samples": CORRELATION_SAMPLES, "noise_samples": 3}


def trust_cost(
    cfg: AppConfig, arch: str, layer: str, methods: list[str], image_size: tuple[int, int] | None = None
) -> Cost:
    """A trust report's forward passes (``/trust``, one photo): :func:`nstcam.cam.trust.trust_passes`
    with each method's map at 2 passes (a forward and a backward) plus its masked images
    (:func:`cam_cost`: Score-CAM and co.), every pass counted as the photos an image of ``image_size``
    holds at the network (:func:`nstcam.app.guard.shapes.pass_factor`); KPCA-CAM's eigensolve of each of its
    maps added. Over the limit, the fix names the methods that mask."""
    factor = pass_factor(arch, image_size)
    masked = {m: 0 if m == "kpcacam" else int(cam_cost(cfg, arch, layer, 1, m).units) for m in methods}
    settings = trust_settings(cfg)
    maps = 1 + maps_per_image(settings["noise_samples"])  # each method's maps of the one photo
    eig = sum(kpca_passes(arch, layer, image_size) * maps for m in methods if m == "kpcacam")
    dear = [m for m in methods if masked[m] > 0 or m == "kpcacam"]
    why = (
        "a masked image per channel, for each of its maps"
        if "kpcacam" not in dear
        else ("a masked image per channel, or an eigensolve, for each of its maps")
    )
    masking = f"Leave out {', '.join(dear)} ({why}), or c"
    crop = ", or crop the image nearer a 16:9 photo's shape" if factor > 1 else ""
    fix = f"{masking if dear else 'C'}ompare fewer methods{crop}."
    shape = f" at {image_size[0]}x{image_size[1]} px" if image_size and factor > 1 else ""
    passes = trust_passes([2 + p for p in masked.values()], 1, **settings)
    return Cost(
        f"a trust report of {len(methods)} methods ({', '.join(methods)}) on {arch} {layer}{shape}",
        math.ceil(passes * factor) + eig,
        cfg.scorecam_budget,
        "forward passes"
        + (f" (each counts {factor:.2g} photos, the image's pixels at the network)" if factor > 1 else ""),
        fix,
        _server(cfg),
    )


def features_cost(
    cfg: AppConfig, top: float | None, model: str = "vgg16_bn", image_size: tuple[int, int] | None = None
) -> Cost:
    """A feature-map request's forward passes (``/features``): one, stopped at the layer, of as many
    photos as an image of ``image_size`` holds at the network (VGG16_bn takes the long side at 224:
    one); ``top`` (the channels shown) in range first. At most the widest image
    :data:`nstcam.app.guard.shapes.MAX_ASPECT` lets through."""
    check(top, "channels", 1, 64)
    factor = 1.0 if model == "vgg16_bn" else pass_factor(model, image_size)
    return Cost(
        "a feature-map request",
        factor,
        1.0 if model == "vgg16_bn" else widest_factor(model),
        "forward passes of a 16:9 photo",
        where=_server(cfg),
    )


def clip_cost(
    cfg: AppConfig,
    name: str,
    frames: int,
    window: int,
    stride: int,
    arch: str | None = None,
    frame_size: tuple[int, int] | None = None,
) -> Cost:
    """A clip request's windows planned (``/gradcam_video``): ``frames`` decoded frames, windows of
    ``window`` frames (1: an image model, frame by frame), ``stride`` apart; each counted as the 16:9
    windows a frame of ``frame_size`` holds at ``arch``'s network; at most one window per frame the
    server takes (``max_video_frames``)."""
    windows = len(window_starts(frames, window, max(1, stride)))
    factor = pass_factor(arch, frame_size) if arch and frame_size else 1.0
    shape = f" of {frame_size[0]}x{frame_size[1]} px" if frame_size and factor > 1 else ""
    return Cost(
        f"{name}: {frames:,} frames{shape}",
        math.ceil(windows * factor),
        cfg.max_video_frames,
        "windows" + (f" (each counts {factor:.2g}, the frame's pixels at the network)" if factor > 1 else ""),
        "Trim the clip.",
        _server(cfg),
    )


def volume_passes(top_k: int) -> int:
    """Forward-pass equivalents of explaining a volume: one pass for its top classes, one forward
    and one backward (about two forwards) per class for the maps."""
    return 2 + 2 * top_k


def max_volume_side(cfg: AppConfig) -> int:
    """Longest side a volume may have: twice the side of the largest cube (256 on a CPU)."""
    return 2 * round(cfg.max_volume_values ** (1 / 3))


def volume_cost(cfg: AppConfig, name: str, shape: tuple[int, ...], top_k: int) -> Cost:
    """A volume request's voxel-passes (the volume tab; passes x voxels of the volume, its one
    window); a side over :func:`max_volume_side` is refused first, by name."""
    sides = tuple(shape[-3:])
    longest = max_volume_side(cfg)
    if max(sides) > longest:
        raise refuse(
            f"{name} is {' x '.join(map(str, sides))} voxels; each side may be at most {longest} on this "
            "server (a long, thin volume costs 2 to 4 times a cube of as many voxels)"
        )
    return Cost(
        f"{name} ({' x '.join(map(str, sides))} voxels, top-{top_k})",
        volume_passes(top_k) * math.prod(sides),
        cfg.max_volume_voxel_passes,
        "voxel-passes",
        "Send a smaller volume.",
        _server(cfg),
    )


ESTIMATES: Registry[Callable[..., Cost]] = Registry(
    "endpoint",
    {
        "stylize": style_cost,
        "subject_aware": style_cost,
        "learn_style": learn_cost,
        "stylize_video": video_cost,
        "gradcam": cam_cost,
        "faithfulness": faithfulness_cost,
        "trust": trust_cost,
        "features": features_cost,
        "gradcam_video": clip_cost,
        "gradcam_volume": volume_cost,
    },
)
"""Each endpoint's estimator, by its API name (the volume tab's by its queue's: it has no API)."""


def request_cost(endpoint: str, cfg: AppConfig, *args: object, **kwargs: object) -> Cost:
    """What a request to ``endpoint`` will cost, from its arguments (the estimator's, after ``cfg``);
    ``.check()`` refuses it in one line over this server's limit.

    Example:
        >>> cfg = AppConfig(random_weights=True, device="cpu", scorecam_budget=1024)
        >>> request_cost("gradcam", cfg, "resnet18", "layer4", 1, "scorecam").units
        512
    """
    return ESTIMATES.get(endpoint)(cfg, *args, **kwargs)
