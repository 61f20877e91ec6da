"""The style engine: :class:`StyleTransfer`, Gatys-style neural style transfer on VGG16_bn.

The class is a thin front: it checks arguments, makes a plan (``_plan``) and hands it to the
per-call units: targets (``_targets``), the optimisation loop (``_optimize``), output
(``_output``), one run (``_run``) and batches (``_batch``). Its only state is a read-only
:class:`~nstcam.style._runtime.Runtime`, so one engine serves any number of threads at once.

Example:
    >>> st = StyleTransfer(weights="imagenet")
    >>> img = st.stylize("cat.jpg", "starry.jpg", size=512, steps=300)
    >>> img.save("cat_starry.png")
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from nstcam._checks import whole
from nstcam.anchor import PixelAnchor
from nstcam.image import SAMPLES, ImageSource, load_image
from nstcam.mask import MaskSource, load_mask
from nstcam.style._base import StyleEngine
from nstcam.style._batch import BatchResult, batch_call, load_styles, many_call
from nstcam.style._plan import Plan, make_plan
from nstcam.style._regions import load_regions
from nstcam.style._run import run
from nstcam.style._runtime import Runtime
from nstcam.style._types import StepInfo

if TYPE_CHECKING:
    from nstcam.video import VideoResult

__all__ = ["StyleTransfer", "stylize_defaults"]

logger = logging.getLogger(__name__)


class StyleTransfer(StyleEngine):
    """Neural style transfer (Gatys et al.) on a VGG (VGG16_bn by default): :meth:`stylize` one
    image, a folder (:meth:`stylize_batch`), same-size images together (:meth:`stylize_many`), a clip
    (:meth:`stylize_video`), or many contents by one :meth:`plan` (:meth:`run_plan`: what scale-out
    workers call).

    It runs a frozen eval copy of ``model.features``, BatchNorm folded into the convolutions; forward
    hooks read the ReLU outputs and stop the pass at the deepest layer needed (``model`` is only read).

    Thread safety: every call makes its own plan, hooks, targets and optimiser, and hooks record only
    their own call's passes, so any number of threads may call one engine at once, each getting what
    it would alone (bit-identical on CPU). A compiling engine runs calls on its owner thread.

    Args:
        weights: ``"imagenet"``, ``"random"`` or a state dict's path (in torchvision's layout for
            ``arch``); ignored when ``model`` is given.
        model: a ready torchvision VGG (``vgg16_bn``, ``vgg16``, ``vgg19``...; a caffe model
            converted to torchvision's layout too).
        device: where to run; default CUDA, else MPS, else CPU.
        arch: the VGG built by name: ``"vgg16_bn"`` (default), ``"vgg16"``, ``"vgg19"`` or
            ``"vgg19_bn"``; its layers are named ``reluB_I`` (VGG19's ``relu5_4`` too) and the pass
            still stops at the deepest layer a call needs.
        mean: the network's per-channel mean of RGB in [0, 1] (default: the weights' own, ImageNet's
            for torchvision's); ``std`` likewise.
        std: see ``mean``.
        transform: a :class:`nstcam.Preprocess` (``Preprocess.caffe()`` for a caffe VGG: BGR,
            0-255, less its means) or a torchvision weights transform, as GradCAM takes it.
        bgr: the network takes BGR (caffe's order); with ``mean`` and ``std`` of a caffe VGG.
        fold_bn: fold BatchNorm into the convolutions.
        amp: bfloat16 autocast of the forward pass on GPUs with native bf16 (compute capability 8.0+;
            else ignored, with a warning); Grams and losses stay float32. Off: quality not measured.
        channels_last: channels-last memory format; default on for CUDA.
        seed: seed of random weights.
        compile: each step one ``torch.compile``d function (CUDA graphs; ``_compiled.py``), every call
            on one owner thread (``_owner.py``); default on for CUDA only. Masked runs stay eager.

    Attributes:
        model: the VGG16_bn given or built (``net``, ``weights``: see the properties).
    """

    # -- public API ---------------------------------------------------------------------------
    def stylize(
        self,
        content: ImageSource,
        style: ImageSource | Sequence[ImageSource],
        *,
        size: int = 512,
        steps: int | Sequence[int] = 300,
        style_weight: float = 0.5,
        content_weight: float = 1.0,
        tv_weight: float = 5.0,
        optimizer: str = "lbfgs",
        init: str | ImageSource = "content",
        anchors: Sequence[PixelAnchor] | None = None,
        style_weights: Sequence[float] | None = None,
        style_layers: Sequence[str] | Mapping[str, float] | None = None,
        content_layers: Sequence[str] | None = None,
        layer_balance: bool = True,
        style_scale: float = 1.0,
        preserve_color: bool | str = False,
        style_mask: MaskSource | None = None,
        mask_mode: str = "optimize",
        scales: Sequence[int] | None = None,
        seed: int | None = None,
        lr: float | None = None,
        history_size: int = 50,
        progress: Callable[[StepInfo], bool | None] | None = None,
        preview_every: int = 0,
        progress_bar: bool | None = None,
        on_memory: str = "error",
        progress_every: int | None = None,
        tile: int | None = None,
        tile_overlap: int | None = None,
        style_loss: str = "gram",
        average: float | bool = False,
        style_masks: Sequence[MaskSource | None] | None = None,
    ) -> Image.Image:
        """Stylises ``content`` with ``style``.

        Args:
            content: the content image (anything :func:`nstcam.load_image` takes).
            style: one style image, or a list of them to blend.
            size: long side of the output, in pixels.
            steps: evaluations of the network (forward + backward) per scale, whatever the
                optimiser; or one count per scale.
            style_weight, content_weight, tv_weight: the weights of the style, content and
                smoothness losses; the defaults keep the subject on a real VGG16 (docs/style.md).
            optimizer: ``"lbfgs"`` or ``"adam"``.
            init: start from the ``"content"``, ``"noise"``, the ``"style"``, noise of the style's
                RGB mean and covariance (``"style_stats"``), a pretrained network's painting
                (``"fast"``: Magenta's arbitrary network, real weights; ``style/_fast_init.py``), or
                an image (anything :func:`nstcam.load_image` takes; resized to each image's size).
            anchors: extra pixel-space loss terms (:class:`nstcam.PixelAnchor`): each pulls the
                result towards its image where its mask says (video: the warped previous frame).
            style_weights: blend weights of several style images (normalised to sum to 1).
            style_layers: style layers, or a mapping layer -> weight (default: relu1_1 ... relu5_1,
                equal weights).
            content_layers: content layers (default: relu4_2).
            layer_balance: each style layer's weight divided by how far apart that layer finds a
                reference photo and painting on this network (measured once per engine,
                ``style/_balance.py``), so layers count alike whatever the network's activation
                scale (random or real, BatchNorm or caffe weights); False: the weights as given.
            style_scale: size of the style image relative to the output (1 = same long side).
            preserve_color: keep the content's colours: ``"luminance"`` (or True) transfers the
                luminance only and puts the content's chroma back; ``"histogram"`` recolours the
                style images to the content's RGB mean and covariance first, then transfers
                normally (Gatys et al. 2016); False: the style's colours.
            style_mask: H x W values in [0, 1] (any size; array, tensor, image or path): 1 where the
                style goes, 0 where the content is kept.
            mask_mode: ``"optimize"`` weights the losses by the mask (masked style Grams, content
                loss 10x stronger and a pixel-space anchor where the mask is 0); ``"blend"``
                stylises everything, then blends ``mask * stylised + (1 - mask) * content``.
            scales: long sides to optimise at, coarse to fine; each starts from the previous result
                upscaled. Default: ``size`` alone up to 512 px, else halving down to 256 px.
            seed: seed of the noise initialisation (recorded in the result either way).
            lr: learning rate (default 1 for L-BFGS, 0.02 for Adam).
            history_size: L-BFGS history size.
            progress: called after every step with a :class:`StepInfo`; return False to cancel.
            preview_every: put a preview image in the :class:`StepInfo` every N steps (0: never).
            progress_bar: a tqdm bar of the steps; None: only where a person watches (a terminal).
            on_memory: if the run would not fit in free memory, ``"error"`` raises
                :class:`InsufficientMemoryError`; ``"reduce"`` optimises in tiles (the largest of
                2048, 1024, ..., 128 px that fits, when ``tile`` is not given), else lowers ``size``
                until it fits.
            progress_every: call ``progress`` every N steps (and on preview steps); reading the
                losses waits for the device, so the default is 1 on CPU and 10 elsewhere.
            tile: optimise scales above this many px window by window, so peak memory follows
                the tile (``nstcam/style/_tiles.py``: whole-image style Grams, ``steps`` per window,
                row-major, blended overlaps). Not with a ``style_mask`` in ``mask_mode="optimize"``.
            tile_overlap: px neighbouring windows share (``<= tile // 4``; ``min(64, tile // 4)``).
            style_loss: ``"gram"`` (Gatys), ``"wasserstein"`` (the squared W2 distance of Gaussians
                fitted to each layer's features) or ``"sliced"`` (of their distributions along random
                directions, fresh each step from ``seed``). ``style/losses/``.
            average: the result is the bias-corrected moving average of the iterates with this decay
                (0.99; False: off), not the best; the next scale starts from it (Adam: its moments too).
            style_masks: a style per region: one mask per style (as ``style_mask`` takes them; one may
                be None: the rest). Each style's loss reads its own region; where no mask reaches, the
                content is kept. ``style_weights`` weigh the regions' losses. ``style/_regions.py``.

        Returns:
            The stylised RGB image. ``image.info["nstcam"]`` holds the parameters used (``params``),
            the loss history (``history``, one dict per step) and the weights notice.

        Raises:
            Cancelled: the progress callback returned False; holds the partial result.
            ImageError: an input is not a usable image.
            InsufficientMemoryError: the run does not fit in memory and ``on_memory="error"``.
            ValueError: a parameter is out of range.
        """
        params = {k: v for k, v in locals().items() if k not in _NOT_PLANNED}
        content_img, style_imgs = load_image(content), load_styles(style)
        mask = load_mask(style_mask) if style_mask is not None else None
        start = None if isinstance(init, str) else load_image(init)
        plan = make_plan(
            n_styles=len(style_imgs),
            **{**params, "init": init if start is None else start},
            **self._rt.planning(),
        )
        regions = None if style_masks is None else load_regions(style_masks, len(style_imgs))
        extra = {"init": start, "anchors": list(anchors or []), "regions": regions}
        return self._rt.call(
            run, self._rt, content_img, style_imgs, plan, progress, progress_bar, {}, mask, **extra
        )

    def stylize_batch(
        self,
        contents: str | Path | Sequence[ImageSource],
        style: ImageSource | Sequence[ImageSource],
        out_dir: str | Path,
        *,
        overwrite: bool = False,
        ext: str = ".png",
        progress_bar: bool | None = None,
        batch_size: int = 1,
        **params: Any,
    ) -> BatchResult:
        """Stylises many content images with the same style; style targets are computed once.

        Args:
            contents: a list of images, a directory (its image files), or a glob pattern.
            style: one style image or a list to blend (see :meth:`stylize`).
            out_dir: where outputs go, as ``<stem>_stylized<ext>`` with a ``.json`` sidecar.
            overwrite: redo inputs whose output already exists.
            ext: ``".png"`` or ``".jpg"``.
            progress_bar: tqdm bars of the images and steps; None: where a person watches.
            batch_size: optimise up to this many same-size images together (as :meth:`stylize_many`).
            **params: any keyword of :meth:`stylize` except ``progress_bar``. ``style_mask`` may also be
                a callable that takes each content image (PIL) and returns its mask.

        Returns:
            The output paths (a :class:`BatchResult`; ``.failed`` maps each bad input to its error).
            A bad input is logged and skipped; the rest complete.
        """
        return self._rt.call(
            batch_call,
            self._rt,
            contents,
            style,
            out_dir,
            overwrite=overwrite,
            ext=ext,
            progress_bar=progress_bar,
            batch_size=batch_size,
            defaults=stylize_defaults(),
            **params,
        )

    def stylize_many(
        self,
        contents: Sequence[ImageSource],
        style: ImageSource | Sequence[ImageSource],
        *,
        inits: Sequence[ImageSource | None] | None = None,
        anchors: Sequence[Sequence[PixelAnchor]] | None = None,
        **params: Any,
    ) -> list[Image.Image]:
        """Stylises same-size ``contents`` together: one forward and backward pass per step for all,
        each image with its own targets, losses, start image (``inits``) and ``anchors``; the same
        results as one at a time up to float noise. Needs ``optimizer="adam"`` for more than one
        image (L-BFGS's line search would couple them). ``params``: as :meth:`stylize`."""
        kw = {**stylize_defaults(), **params}
        return self._rt.call(many_call, self._rt, contents, style, inits, anchors, kw)

    def stylize_video(
        self, video: str | Path, style: ImageSource | Sequence[ImageSource], output: str | Path, **params: Any
    ) -> VideoResult:
        """Stylises a clip without flicker (temporal consistency, Ruder et al. 2016); ``params``:
        see :func:`nstcam.video.stylize_video` (size, steps, temporal_weight, flow, passes...)."""
        from nstcam.video import stylize_video  # PyAV and OpenCV load with the first clip, not the engine

        return stylize_video(self, video, style, output, **params)

    def plan(self, n_styles: int = 1, **params: Any) -> Plan:
        """:meth:`stylize`'s keywords ``params`` checked once into a plan for ``n_styles`` style images,
        to stylise many contents with (:meth:`run_plan`)."""
        return make_plan(n_styles=n_styles, **{**stylize_defaults(), **params}, **self._rt.planning())

    def run_plan(
        self, content: ImageSource, styles: Sequence[ImageSource], plan: Plan, cache: dict | None = None
    ) -> Image.Image:
        """Stylises ``content`` by a :meth:`plan`, on the engine's owner thread when it compiles.
        ``cache`` (one per worker) keeps the style targets for the next content of the same size."""
        imgs = [load_image(s) for s in styles]
        kept = {} if cache is None else cache
        return self._rt.call(run, self._rt, load_image(content), imgs, plan, None, False, kept)

    def warmup(self, width: int, height: int, **params: Any) -> float:
        """Compiles the step for ``width`` x ``height`` outputs ahead of the first request and
        returns the seconds it took (see :func:`warmup`)."""
        return self._rt.call(warmup, self._rt, width, height, **params)


_NOT_PLANNED = (
    "self",
    "content",
    "style",
    "progress",
    "progress_bar",
    "style_mask",
    "anchors",
    "style_masks",
)


def stylize_defaults() -> dict[str, Any]:
    sig = inspect.signature(StyleTransfer.stylize)
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and k not in _NOT_PLANNED
    }


def warmup(rt: Runtime, width: int, height: int, **params: object) -> float:
    """Runs two Adam steps on a ``width`` x ``height`` photo (the packaged cat in mid-tones, styled by
    the brick texture), so that a compiling engine compiles its step for that size now rather than in
    the first request; returns the seconds. A photo, not a blank image, and in mid-tones: the compiled
    step's self-check adds clamped noise to it, and a black, white or saturated patch clamps flat,
    where max pooling ties and eager and compiled steps may route the gradient apart
    (``_selfcheck.py``).

    ``params`` are :meth:`StyleTransfer.stylize` keywords that change the compiled function
    (``style_layers``, ``content_layers``); sizes and loss weights do not need them.
    """
    t = time.perf_counter()
    size = (whole("width", width, minimum=16), whole("height", height, minimum=16))
    photo = load_image(SAMPLES / "chelsea.png").resize(size, Image.Resampling.BILINEAR)
    photo = Image.eval(photo, lambda v: 64 + v // 2)  # mid-tones: the check's noise is never clamped flat
    texture = load_image(SAMPLES / "brick.png")
    kw = {**stylize_defaults(), "size": max(size), "steps": 2, "seed": 0, "optimizer": "adam", **params}
    run(rt, photo, [texture], make_plan(n_styles=1, **kw, **rt.planning()), None, False, {})
    return time.perf_counter() - t
