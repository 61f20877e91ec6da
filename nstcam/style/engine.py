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

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from nstcam._checks import whole
from nstcam.anchor import PixelAnchor
from nstcam.fast import TEACHERS
from nstcam.image import SAMPLES, ImageSource, load_image
from nstcam.mask import MaskSource, load_mask
from nstcam.style._base import StyleEngine
from nstcam.style._batch import BatchResult, batch_call, load_styles, many_call
from nstcam.style._perceptual import PerceptualLoss
from nstcam.style._plan import Plan, make_plan
from nstcam.style._regions import load_regions
from nstcam.style._run import run
from nstcam.style._runtime import Runtime
from nstcam.style._types import StepInfo
from nstcam.style.options import StyleChanges, StyleOptions, shows_style_options, stylize_defaults

if TYPE_CHECKING:
    from typing import Unpack  # Python 3.11; annotations only (3.10 runs too)

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
    @shows_style_options
    def stylize(
        self,
        content: ImageSource,
        style: ImageSource | Sequence[ImageSource],
        options: StyleOptions | None = None,
        *,
        style_mask: MaskSource | None = None,
        style_masks: Sequence[MaskSource | None] | None = None,
        anchors: Sequence[PixelAnchor] | None = None,
        progress: Callable[[StepInfo], bool | None] | None = None,
        progress_bar: bool | None = None,
        **changes: Unpack[StyleChanges],
    ) -> Image.Image:
        """Stylises ``content`` with ``style``.

        Args:
            content: the content image (anything :func:`nstcam.load_image` takes).
            style: one style image, or a list of them to blend (``style_weights``).
            options: how it runs (:class:`~nstcam.style.StyleOptions`: size, steps, loss weights,
                optimiser, init, layers, tiles...); default: the defaults.
            style_mask: H x W values in [0, 1] (any size; array, tensor, image or path): 1 where the
                style goes, 0 where the content is kept (``mask_mode`` says how).
            style_masks: a style per region: one mask per style (as ``style_mask`` takes them; one may
                be None: the rest). Each style's loss reads its own region; where no mask reaches, the
                content is kept. ``style_weights`` weigh the regions' losses. ``style/_regions.py``.
            anchors: extra pixel-space loss terms (:class:`nstcam.PixelAnchor`): each pulls the
                result towards its image where its mask says (video: the warped previous frame).
            progress: called after every step with a :class:`StepInfo`; return False to cancel.
            progress_bar: a tqdm bar of the steps; None: only where a person watches (a terminal).
            **changes: any option of :class:`~nstcam.style.StyleOptions` by name, over ``options``:
                ``st.stylize(c, s, size=256, steps=100, style_loss="wasserstein")``.

        Returns:
            The stylised RGB image. ``image.info["nstcam"]`` holds the parameters used (``params``),
            the loss history (``history``, one dict per step) and the weights notice.

        Raises:
            Cancelled: the progress callback returned False; holds the partial result.
            ImageError: an input is not a usable image.
            InsufficientMemoryError: the run does not fit in memory and ``on_memory="error"``.
            TypeError: a keyword names no option.
            ValueError: an option is out of range.
        """
        opts = StyleOptions.of(options, **changes)
        content_img, style_imgs = load_image(content), load_styles(style)
        mask = load_mask(style_mask) if style_mask is not None else None
        start = None if isinstance(opts.init, str) else load_image(opts.init)
        plan = make_plan(opts, n_styles=len(style_imgs), **self._rt.planning())
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
        return self._rt.call(many_call, self._rt, contents, style, inits, anchors, params)

    def stylize_video(
        self, video: str | Path, style: ImageSource | Sequence[ImageSource], output: str | Path, **params: Any
    ) -> VideoResult:
        """Stylises a clip without flicker (temporal consistency, Ruder et al. 2016); ``params``:
        see :func:`nstcam.video.stylize_video` (size, steps, temporal_weight, flow, passes...)."""
        from nstcam.video import stylize_video  # PyAV and OpenCV load with the first clip, not the engine

        return stylize_video(self, video, style, output, **params)

    @shows_style_options
    def plan(
        self, n_styles: int = 1, options: StyleOptions | None = None, **changes: Unpack[StyleChanges]
    ) -> Plan:
        """``options`` (with ``changes``, as :meth:`stylize` takes them) resolved once into a plan for
        ``n_styles`` style images, to stylise many contents with (:meth:`run_plan`)."""
        return make_plan(StyleOptions.of(options, **changes), n_styles=n_styles, **self._rt.planning())

    def run_plan(
        self, content: ImageSource, styles: Sequence[ImageSource], plan: Plan, cache: dict | None = None
    ) -> Image.Image:
        """Stylises ``content`` by a :meth:`plan`, on the engine's owner thread when it compiles.
        ``cache`` (one per worker) keeps the style targets for the next content of the same size."""
        imgs = [load_image(s) for s in styles]
        kept = {} if cache is None else cache
        return self._rt.call(run, self._rt, load_image(content), imgs, plan, None, False, kept)

    @shows_style_options
    def perceptual_loss(
        self,
        style: ImageSource | Sequence[ImageSource],
        options: StyleOptions | None = None,
        **changes: Unpack[StyleChanges],
    ) -> PerceptualLoss:
        """The engine's loss as a function of painted images, to train a network with (Johnson et
        al. 2016): ``with st.perceptual_loss(painting, size=256) as loss: loss(images, photos)[0]``
        is each image's weighted total, through the same hooks, layers, weights, layer balance and
        style loss as :meth:`stylize` at those options; the style read at ``size * style_scale``.

        Raises:
            ValueError: an option out of range, or one the optimisation alone takes (``tile``,
                ``preserve_color``).
        """
        imgs = load_styles(style)
        plan = make_plan(StyleOptions.of(options, **changes), n_styles=len(imgs), **self._rt.planning())
        return PerceptualLoss(self._rt, imgs, plan)

    def warmup(self, width: int, height: int, **params: Any) -> float:
        """Compiles the step for ``width`` x ``height`` outputs ahead of the first request and
        returns the seconds it took (see :func:`warmup`)."""
        return self._rt.call(warmup, self._rt, width, height, **params)


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
    opts = StyleOptions.of(**{"size": max(size), "steps": 2, "seed": 0, "optimizer": "adam", **params})
    run(rt, photo, [texture], make_plan(opts, n_styles=1, **rt.planning()), None, False, {})
    return time.perf_counter() - t


TEACHERS["default"] = StyleTransfer  # FastStyle().learn(painting) without engine=: VGG16_bn, official weights
