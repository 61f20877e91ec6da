"""A stylisation's options, in one place: :class:`StyleOptions`.

Every way in builds one and passes it on: :meth:`StyleTransfer.stylize` and its siblings (their keywords
build it, so ``st.stylize(c, s, size=256, steps=100)`` still reads as it did), the plan
(:func:`nstcam.style._plan.make_plan` resolves it for a network and a count of styles), the app's
Style tab and its MCP tool, the CLI (``nstcam stylize``) and Ray Data
(:func:`nstcam.distributed.stylize_dataset`).
A new option is one field here, with its default and its check; the defaults shown anywhere else
(``--style-weight``'s help, the app's Advanced panel) are read from it (:func:`stylize_defaults`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from nstcam._checks import finite, whole
from nstcam._choices import one_of
from nstcam._options import option_names, options_of, shows_options
from nstcam.image import ImageSource

__all__ = [
    "DEFAULT_STRENGTH",
    "INITS",
    "OPTIMIZERS",
    "OPTION_NAMES",
    "PREVIEW_SIDE",
    "PRINT_STEPS",
    "StyleChanges",
    "StyleOptions",
    "auto_scales",
    "auto_steps",
    "fitted_steps",
    "print_scales",
    "print_steps",
    "split_steps",
    "strength_weight",
    "shows_style_options",
    "stylize_defaults",
]

OPTIMIZERS = ("lbfgs", "adam")
STRENGTH_WEIGHT = 10.0
"""The style weight at strength 1. From the fast painting, at the default scales and steps, it moves
the style further than the arbitrary network's one pass and keeps every subject the one pass keeps
(``bench_style_quality.py`` at 512 px: 0.575 against 0.562 over eight pairs, 6 subjects kept
against 2; docs/style.md)."""
STRENGTH_CURVE = 5.9
"""How the weight grows with strength: ``(exp(k s) - 1) / (exp(k) - 1)``. The judge's style move
grows by about 0.084 per e-fold of the weight (``bench_style_real.py``), so an exponential makes it
grow about in step with the strength, as Fast's strength does. ``k`` is set so that strength 0.5 moves
the style about as far as Fast's 0.5 (``bench_style_quality.py`` at 256 px: with k = 3.3, style
weight 1.6, it moved 0.426 against Fast's 0.319; 0.1 less is about 1.2 e-folds of the weight
less, 0.5, which k = 5.9 gives)."""
DEFAULT_STRENGTH = 1.0
"""The strongest style that keeps the subject: style weight ``STRENGTH_WEIGHT``."""


def strength_weight(strength: float) -> float:
    """The style weight of ``strength`` (0 to 1): 0 at 0, ``STRENGTH_WEIGHT`` at 1, growing as
    ``exp(STRENGTH_CURVE * strength)`` between."""
    k = STRENGTH_CURVE
    return STRENGTH_WEIGHT * math.expm1(k * float(strength)) / math.expm1(k)


INITS = ("auto", "content", "noise", "style", "style_stats", "fast")
DEFAULT_STEPS_FINEST = 20
"""With ``steps=None``: the finest scale's evaluations; each coarser scale takes 2x the next finer's
(most work where it is cheap), a single scale 100."""
PREVIEW_SIDE = 512
"""The preview's long side (the app's largest on a CPU). A larger size with the default scales is
a print of that preview (issue 76): it runs the preview's own plan first (its scales and steps, so
its result at this size is the preview's), then refines it at each doubling up to the size asked."""
PRINT_STEPS = 10
"""With ``steps=None``: a print's evaluations at its first scale past the preview; half that at each
finer scale, at least 2 (the preview's look is there; the finer scales add the strokes' detail)."""


@dataclass(frozen=True, kw_only=True)
class StyleOptions:
    """How one stylisation runs, checked when made (a bad value raises ``ValueError`` naming the
    option and what it accepts; an unknown name, ``TypeError`` naming the closest option).

    Attributes:
        size: long side of the output, in pixels.
        steps: evaluations of the network (forward + backward) per scale, whatever the optimiser;
            or one count per scale; None (default): :func:`auto_steps` (20 at the finest scale, 2x
            that at each coarser one; 100 for a single scale), ended sooner by ``tolerance``; past
            ``PREVIEW_SIDE`` (512 px) with the default scales, a print's (:func:`print_steps`:
            the 512 px preview's 40 and 20, then 10, 5, 2...).
        style_weight: weight of the style loss, for experts: given, it overrides ``strength``;
            None (default): ``strength``'s (:func:`strength_weight`). With ``content_weight`` and
            ``tv_weight``, the defaults keep the subject on a real VGG16 (docs/style.md).
        strength: how much of the style, 0 (the photo, returned as it is) to 1 (style weight
            ``STRENGTH_WEIGHT``, 10); it sets the style weight (:func:`strength_weight`) and, with
            the fast start, the fast painting's strength, so that a strength moves the style about
            as far here as in :meth:`nstcam.FastStyle.stylize` (docs/style.md's table).
        content_weight: weight of the content loss.
        tv_weight: weight of the smoothness (total variation) loss.
        optimizer: ``"lbfgs"`` or ``"adam"``.
        init: ``"auto"`` (default): the fast painting (``"fast"``) where the fast network's weights
            are here (with a style mask or regions, the painting where the style goes; in tiles,
            the whole picture's painting), else the content (said in one log line). Or start
            from the ``"content"``, ``"noise"``, the ``"style"``, noise of the style's RGB
            mean and covariance (``"style_stats"``), a pretrained network's painting (``"fast"``:
            Magenta's arbitrary network, real weights; ``style/_fast_init.py``), or an image
            (anything :func:`nstcam.load_image` takes but a string; resized to each image's size).
        style_weights: blend weights of several style images (normalised to sum to 1).
        style_layers: style layers, or a mapping layer -> weight (default: relu1_1 ... relu5_1,
            equal weights).
        content_layers: content layers (default: relu4_2).
        layer_balance: each style layer's weight divided by how far apart that layer finds a
            reference photo and painting on this network (measured once per engine,
            ``style/_balance.py``), so layers count alike whatever the network's activation scale
            (random or real, BatchNorm or caffe weights); False: the weights as given. Gram only:
            the balance is measured in Gram terms, so ``"wasserstein"`` and ``"sliced"`` take the
            weights as given (the result's params say ``layer_balance_applied``).
        style_scale: size of the style image relative to the output (1 = same long side).
        preserve_color: keep the content's colours: ``"luminance"`` (or True) transfers the
            luminance only and puts the content's chroma back; ``"histogram"`` recolours the style
            images to the content's RGB mean and covariance first, then transfers normally (Gatys et
            al. 2016); False: the style's colours.
        mask_mode: with a style mask, ``"optimize"`` weights the losses by the mask (masked style
            Grams, content loss 10x stronger and a pixel-space anchor where the mask is 0);
            ``"blend"`` stylises everything, then blends ``mask * stylised + (1 - mask) * content``.
        scales: long sides to optimise at, coarse to fine; each starts from the previous result
            upscaled. Default (:func:`auto_scales`): ``size`` alone below 256 px, else its half
            then ``size``; from 1024 px, halving further down to 256 px.
        seed: seed of the noise initialisation (None: drawn; recorded in the result either way).
        lr: learning rate (default 1 for L-BFGS, 0.02 for Adam).
        history_size: L-BFGS history size.
        preview_every: put a preview image in the progress's :class:`~nstcam.style.StepInfo` every N
            steps (0: never).
        on_memory: if the run would not fit in free memory, ``"error"`` raises
            :class:`~nstcam.style.InsufficientMemoryError`; ``"reduce"`` optimises in tiles (the
            largest of 2048, 1024, ..., 128 px that fits, when ``tile`` is not given), else lowers
            ``size`` until it fits.
        progress_every: call the progress callback every N steps (and on preview steps); reading
            the losses waits for the device, so the default is 1 on CPU and 10 elsewhere.
        tile: optimise scales above this many px window by window, so peak memory follows the tile
            (``nstcam/style/_tiles.py``: whole-image style Grams, ``steps`` per window, row-major,
            blended overlaps). Not with a style mask in ``mask_mode="optimize"``.
        tile_overlap: px neighbouring windows share (``<= tile // 4``; ``min(64, tile // 4)``).
        style_loss: ``"gram"`` (Gatys), ``"wasserstein"`` (the squared W2 distance of Gaussians
            fitted to each layer's features) or ``"sliced"`` (of their distributions along random
            directions, fresh each step from ``seed``). ``style/losses/``.
        average: the result is the bias-corrected moving average of the iterates with this decay
            (0.99; False: off), not the best; the next scale starts from it (Adam: its moments too).
        tolerance: a scale ends before its ``steps`` once converged: when its best total loss fell
            by less than ``tolerance`` x the scale's first loss over the last ``CONVERGE_WINDOW``
            (20) evaluations; 0: every step runs. The result's history shows the steps run.
            Default 0.002.
    """

    size: int = 512
    steps: int | Sequence[int] | None = None
    style_weight: float | None = None
    strength: float = DEFAULT_STRENGTH
    content_weight: float = 1.0
    tv_weight: float = 5.0
    optimizer: str = "lbfgs"
    init: str | ImageSource = "auto"
    style_weights: Sequence[float] | None = None
    style_layers: Sequence[str] | Mapping[str, float] | None = None
    content_layers: Sequence[str] | None = None
    layer_balance: bool = True
    style_scale: float = 1.0
    preserve_color: bool | str = False
    mask_mode: str = "optimize"
    scales: Sequence[int] | None = None
    seed: int | None = None
    lr: float | None = None
    history_size: int = 50
    preview_every: int = 0
    on_memory: str = "error"
    progress_every: int | None = None
    tile: int | None = None
    tile_overlap: int | None = None
    style_loss: str = "gram"
    average: float | bool = False
    tolerance: float = 0.002

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def of(cls, options: StyleOptions | None = None, /, **changes: Any) -> StyleOptions:
        """``options`` (default: the defaults) with ``changes``: the keyword API's way in.

        Raises:
            TypeError: ``options`` is not a StyleOptions, or a change names no option (the message
                names the closest).
            ValueError: a value is out of range.
        """
        return options_of(cls, options, changes, "a stylisation option")

    def as_dict(self) -> dict[str, Any]:
        """Every option by name (what the result's ``params`` record, with the plan's resolutions)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


OPTION_NAMES: tuple[str, ...] = option_names(StyleOptions)
"""Every option's name, in the order of :class:`StyleOptions`."""


class StyleChanges(TypedDict, total=False):
    """The options as keywords (PEP 692's ``**changes: Unpack[StyleChanges]``), for type checkers and
    IDEs; each is documented in :class:`StyleOptions`, and ``test_layout`` keeps the two equal."""

    size: int
    steps: int | Sequence[int] | None
    style_weight: float | None
    strength: float
    content_weight: float
    tv_weight: float
    optimizer: str
    init: str | ImageSource
    style_weights: Sequence[float] | None
    style_layers: Sequence[str] | Mapping[str, float] | None
    content_layers: Sequence[str] | None
    layer_balance: bool
    style_scale: float
    preserve_color: bool | str
    mask_mode: str
    scales: Sequence[int] | None
    seed: int | None
    lr: float | None
    history_size: int
    preview_every: int
    on_memory: str
    progress_every: int | None
    tile: int | None
    tile_overlap: int | None
    style_loss: str
    average: float | bool
    tolerance: float


shows_style_options = shows_options(StyleOptions)
"""``**changes`` of a function shown as every stylisation option (:func:`nstcam._options.shows_options`)."""


def stylize_defaults() -> dict[str, Any]:
    """Every stylisation option's default, by name: read from :class:`StyleOptions`, the one place
    they live."""
    return StyleOptions().as_dict()


def preserve_color_mode(value: bool | str | None) -> str | bool:
    """``preserve_color`` resolved: ``True`` keeps meaning luminance; ``False``/``None`` and
    ``"off"`` mean no preservation."""
    if value is True or value == "luminance":
        return "luminance"
    if value == "histogram":
        return "histogram"
    if value in (False, None, "off", "none"):
        return False
    raise ValueError(f"preserve_color must be 'luminance', 'histogram' or False, got {value!r}")


def _check(o: StyleOptions) -> None:
    """Every check an option's value takes on its own (what depends on the network or on the count
    of styles, such as a layer's name or ``style_weights``' length, is the plan's)."""
    from nstcam.style.losses import style_loss_named  # the registry: its modules load with it

    one_of("optimizer", o.optimizer, OPTIMIZERS)
    if isinstance(o.init, str):
        one_of("init", o.init, INITS)
    one_of("on_memory", o.on_memory, ("error", "reduce"))
    style_loss_named(o.style_loss)  # an unknown loss refused, listing the registry's
    one_of("mask_mode", o.mask_mode, ("optimize", "blend"))
    scales_and_steps(o.size, o.scales, o.steps)
    for name in ("style_weight", "content_weight", "tv_weight"):
        if name != "style_weight" or o.style_weight is not None:
            finite(name, getattr(o, name), minimum=0)
    finite("strength", o.strength, minimum=0, maximum=1)
    if not finite("style_scale", o.style_scale) > 0:
        raise ValueError(f"style_scale must be > 0, got {o.style_scale!r}")
    if not isinstance(o.layer_balance, bool):
        raise ValueError(f"layer_balance must be True or False, got {o.layer_balance!r}")
    preserve_color_mode(o.preserve_color)
    if o.seed is not None:
        whole("seed", o.seed, minimum=0)
    whole("preview_every", o.preview_every, minimum=0)
    whole("history_size", o.history_size, minimum=1)
    if o.lr is not None and finite("lr", o.lr) <= 0:
        raise ValueError(f"lr must be > 0, got {o.lr:g}")
    if o.progress_every is not None:
        whole("progress_every", o.progress_every, minimum=1)
    tile_overlap(o.tile, o.tile_overlap)
    if o.average is not False and o.average is not None:
        if not 0 < finite("average", o.average) < 1:
            raise ValueError(f"average must be a decay in (0, 1) such as 0.99, or False; got {o.average!r}")
    if not 0 <= finite("tolerance", o.tolerance, minimum=0) < 1:
        raise ValueError(f"tolerance must be 0 (off) or in (0, 1) such as 0.002, got {o.tolerance:g}")


def auto_scales(size: int) -> list[int]:
    """``size`` alone below 256 px; else its half, then ``size``; from 1024 px, halving further
    down to 256 px (coarse to fine). Past ``PREVIEW_SIDE``: a print's (:func:`print_scales`)."""
    if size > PREVIEW_SIDE:
        return print_scales(size)
    scales = [size]
    if size >= 256:
        scales.insert(0, size // 2)
    while scales[0] // 2 >= 256:
        scales.insert(0, scales[0] // 2)
    return scales


def print_scales(size: int) -> list[int]:
    """A print's scales: the preview's (``auto_scales(PREVIEW_SIDE)``: 256 and 512 px), its
    doublings below ``size``, then ``size`` (3000 px: 256, 512, 1024, 2048, 3000)."""
    scales = auto_scales(PREVIEW_SIDE)
    while scales[-1] * 2 < size:
        scales.append(scales[-1] * 2)
    return [*scales, size]


def print_steps(n_scales: int) -> list[int]:
    """A print's evaluations over ``n_scales`` (:func:`print_scales`): the preview's own
    (:func:`auto_steps`), then ``PRINT_STEPS`` halved at each finer scale, at least 2."""
    preview = auto_steps(len(auto_scales(PREVIEW_SIDE)))
    return preview + [max(2, PRINT_STEPS >> k) for k in range(n_scales - len(preview))]


def auto_steps(n_scales: int) -> list[int]:
    """Each scale's evaluations for ``steps=None``: ``DEFAULT_STEPS_FINEST`` at the finest, 2x the
    next finer's at each coarser scale (capped at 300); 100 for a single scale."""
    if n_scales == 1:
        return [100]
    return [min(300, DEFAULT_STEPS_FINEST * 2 ** (n_scales - 1 - i)) for i in range(n_scales)]


def split_steps(size: int, total: int) -> tuple[list[int], list[int]]:
    """The default scales of ``size`` (:func:`auto_scales`) and ``total`` evaluations shared among
    them as :func:`auto_steps` shares its own (each coarser scale twice the next finer's), adding up
    to ``total`` exactly: what a user who asks for 50 steps gets (at 256 px, 33 at 128 px and 17 at
    256 px), where ``steps=50`` alone runs 50 at each scale. Fewer steps than scales drop the
    coarsest scales."""
    total = whole("steps", total, minimum=1)
    scales = auto_scales(whole("size", size, minimum=16))[-total:]
    shares = [2 ** (len(scales) - 1 - i) for i in range(len(scales))]
    steps = [max(1, total * w // sum(shares)) for w in shares]
    steps[-1] += total - sum(steps)  # the rounding's remainder at the finest scale
    if steps[-1] < 1:  # only where each scale's floor of 1 overshot: take it back from the coarsest
        steps[0] += steps[-1] - 1
        steps[-1] = 1
    return scales, steps


AUTO_STEPS_ASPECT = 2 / 3
"""With ``steps=None``: the defaults' work fits a photo of this aspect (3:2, height over width or
width over height) at any long side; a squarer photo, with more pixels per long side, gets
proportionally fewer steps (:func:`fitted_steps`)."""


def fitted_steps(steps: Sequence[int], width: int, height: int) -> list[int]:
    """``steps`` (from :func:`auto_steps`) fitted to a ``width`` x ``height`` photo at the finest
    scale: scaled by ``AUTO_STEPS_ASPECT * long_side**2 / (width * height)`` where that is below 1,
    so a square photo costs what a 3:2 photo of the same long side costs (2/3 of the steps)."""
    long_side = max(width, height)
    factor = min(1.0, AUTO_STEPS_ASPECT * long_side * long_side / (width * height))
    return [max(1, round(n * factor)) for n in steps]


def scales_and_steps(
    size: int, scales: Sequence[int] | None, steps: int | Sequence[int] | None
) -> tuple[list[int], list[int]]:
    """The long sides to optimise at, coarse to fine, and each one's steps, checked."""
    size = whole("size", size, minimum=16)
    given_scales = bool(scales)
    if scales:
        scales = [whole("scales", s, minimum=16) for s in scales]
        if scales != sorted(scales):
            raise ValueError(f"scales must be increasing long sides of at least 16 px, got {scales}")
    else:
        scales = auto_scales(size)
    if steps is None and not given_scales and size > PREVIEW_SIDE:
        steps_list = print_steps(len(scales))
    elif steps is None:
        steps_list = auto_steps(len(scales))
    elif isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
        steps_list = [whole("steps", steps, minimum=1)] * len(scales)
    else:
        steps_list = [whole("steps", s, minimum=1) for s in steps]
        if len(steps_list) != len(scales):
            raise ValueError(f"steps must be one count or one count per scale {scales}, got {steps!r}")
    return scales, steps_list


def tile_overlap(tile: int | None, overlap: int | None) -> int:
    """The px neighbouring windows share: ``overlap`` checked (at most ``tile // 4``), by default
    ``min(64, tile // 4)`` (64 without a tile)."""
    if tile is None:
        return 64 if overlap is None else whole("tile_overlap", overlap, minimum=0)
    tile = whole("tile", tile, minimum=64)
    default = min(64, tile // 4)
    return whole("tile_overlap", default if overlap is None else overlap, minimum=0, maximum=tile // 4)
