"""Image input and output shared by both engines.

:func:`load_image` turns whatever a user hands over (a path, bytes, a file object, a PIL image or a
numpy array) into an RGB :class:`PIL.Image.Image`, or refuses it with an :class:`ImageError` that
names the problem. The other helpers convert between PIL images and tensors, resize, normalise for
ImageNet models and save results.
"""

from __future__ import annotations

import io
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from nstcam._files import atomic_file
from nstcam._mark import RANDOM_LABEL, is_random, mark_random, png_info

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MIN_SIDE",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageError",
    "ImageSource",
    "denormalize",
    "image_to_tensor",
    "load_image",
    "long_side_size",
    "normalize",
    "probe_image",
    "resize_long_side",
    "save_image",
    "tensor_to_image",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PIXELS = 40_000_000
"""Largest image accepted by default (width x height), checked before decoding."""
DEFAULT_MIN_SIDE = 16
"""Smallest accepted width or height, in pixels."""

SAMPLES = Path(__file__).resolve().parent / "assets" / "samples"
"""The sample photos and textures shipped with the package (their licences: LICENSES.md there)."""
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

ImageSource = str | os.PathLike | bytes | bytearray | memoryview | IO[bytes] | Image.Image | np.ndarray

_WHITE = (255, 255, 255)


class ImageError(ValueError):
    """The input is not an image nstcam can use; the message says why and what the limit is."""


# -- loading ----------------------------------------------------------------------------------
def load_image(
    src: ImageSource,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    min_side: int = DEFAULT_MIN_SIDE,
    name: str | None = None,
) -> Image.Image:
    """Loads an image as RGB.

    EXIF orientation is applied; of an animation the first frame is taken; transparent pixels are
    composited on white; 16-bit, 32-bit and float greyscale are scaled to 0-255 (see
    :func:`_to_rgb`).

    Args:
        src: a path, bytes, a binary file object, a PIL image, or a numpy array of shape HxW, HxWx1,
            HxWx3 or HxWx4 holding uint8, or floats in [0, 1].
        max_pixels: largest accepted width x height, checked from the header before decoding;
            ``None`` disables the check.
        min_side: smallest accepted width or height.
        name: how error messages call the image (default: its path); a server passes the
            uploaded file's own name so that no temporary path reaches the user.

    Returns:
        A new RGB image; the caller's image or array is never modified.

    Raises:
        FileNotFoundError: ``src`` is a path that does not exist.
        ImageError: the data is empty, not an image, truncated, too small, too large, or an array
            of the wrong shape, dtype or range.
    """
    if isinstance(src, np.ndarray):
        img = _from_array(src, max_pixels)
    elif isinstance(src, Image.Image):
        _check_pixels(src.size, max_pixels, "image")
        img = _to_rgb(_first_frame(src))
    elif isinstance(src, (str, os.PathLike)):
        what = name or str(src)
        with open(_checked_file(src, what), "rb") as fh:
            img = _decode(fh, max_pixels, what)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        if not data:
            raise ImageError("image data is empty (0 bytes)")
        img = _decode(io.BytesIO(data), max_pixels, name or "image data")
    elif hasattr(src, "read"):
        data = src.read()
        if not isinstance(data, (bytes, bytearray)):
            raise ImageError("file object must be opened in binary mode ('rb')")
        if not data:
            raise ImageError("image file object is empty (0 bytes)")
        img = _decode(io.BytesIO(data), max_pixels, name or getattr(src, "name", "image file"))
    else:
        raise ImageError(
            f"cannot load an image from {type(src).__name__}; pass a path, bytes, a file object, "
            "a PIL image or a numpy array"
        )
    _check_min_side(img.size, min_side, name or "image")
    return img


def probe_image(
    path: str | os.PathLike,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    min_side: int = DEFAULT_MIN_SIDE,
    name: str | None = None,
) -> tuple[int, int]:
    """Checks an image file from its header alone (no pixel is decoded) and returns its size.

    A server calls it on every upload before anything decodes it: a decompression bomb (a few
    hundred KB declaring 13000 x 13000 px) is refused in milliseconds.

    Raises:
        FileNotFoundError: no such file.
        ImageError: empty, not an image, or a size outside the limits; the message calls the file
            ``name`` (default: its path).
    """
    what = name or str(path)
    with open(_checked_file(path, what), "rb") as fh:
        size = _open(fh, max_pixels, what).size  # the header only
    _check_min_side(size, min_side, what)
    return size


def _checked_file(src: str | os.PathLike, what: str) -> Path:
    path = Path(src)
    if not path.exists():
        raise FileNotFoundError(f"image file not found: {what}")
    if path.is_dir():
        raise ImageError(f"{what} is a directory, not an image file")
    if path.stat().st_size == 0:
        raise ImageError(f"{what} is empty (0 bytes)")
    return path


def _check_min_side(size: tuple[int, int], min_side: int, what: str) -> None:
    w, h = size
    if min(w, h) < min_side:
        raise ImageError(f"{what} is {w}x{h} px; each side must be at least {min_side} px")


def _check_pixels(size: tuple[int, int], max_pixels: int | None, what: str) -> None:
    w, h = size
    if max_pixels is not None and w * h > max_pixels:
        raise ImageError(
            f"{what} is {w}x{h} = {w * h / 1e6:.1f} MP, over the limit of {max_pixels / 1e6:.1f} MP; "
            "scale it down first"
        )


def _open(fh: IO[bytes], max_pixels: int | None, what: str, *, load: bool = False) -> Image.Image:
    """Opens an image, refusing it from its header if it is over ``max_pixels``; decodes it only
    with ``load``. Pillow's errors become an :class:`ImageError` that names ``what``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(fh)  # reads the header only
            _check_pixels(im.size, max_pixels, what)
            if load:
                im.load()
    except ImageError:
        raise
    except Image.DecompressionBombError:
        size = _header_size(fh)  # Pillow refused it before saying its size
        if size is not None:
            _check_pixels(size, max_pixels or 0, what)
        limit = f"{max_pixels / 1e6:.1f} MP" if max_pixels else "none set"
        raise ImageError(f"{what} is too large to decode safely (over the limit of {limit})") from None
    except UnidentifiedImageError:
        raise ImageError(f"{what} is not an image in a format Pillow can read") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageError(f"{what} is truncated or corrupt: {e}") from None
    return im


def _header_size(fh: IO[bytes]) -> tuple[int, int] | None:
    """The (width, height) a file's header declares, read by the Pillow plugin that accepts it
    without Pillow's own bomb check (which refuses before saying the size); None if none does."""
    Image.init()
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        try:
            fh.seek(0)
            if accept is not None and not accept(fh.read(16)):
                continue
            fh.seek(0)
            return factory(fh, "").size
        except Exception as e:  # noqa: BLE001 - a plugin that does not take it: try the next
            logger.debug("%s does not read this header: %s", fmt, e)
    return None


def _decode(fh: IO[bytes], max_pixels: int | None, what: str) -> Image.Image:
    return _to_rgb(_first_frame(_open(fh, max_pixels, what, load=True)))


def _first_frame(im: Image.Image) -> Image.Image:
    if getattr(im, "n_frames", 1) > 1 and im.tell() != 0:
        im.seek(0)
    try:
        return ImageOps.exif_transpose(im)  # returns a copy, with the orientation tag applied
    except Exception:  # noqa: BLE001 - a broken EXIF block must not make the image unusable
        logger.warning("ignoring unreadable EXIF data")
        return im.copy()


def _scale_to_uint8(a: np.ndarray, mode: str) -> np.ndarray:
    """Scales greyscale data of a wide mode to 0-255.

    ``I;16*``: 0-65535 maps to 0-255. ``I`` (32-bit int, also how Pillow opens some 16-bit files):
    values within 0-65535 are treated as 16-bit, anything else is scaled by its own min and max.
    ``F``: values within [0, 1] map to 0-255, within [0, 255] are kept, others are min-max scaled.
    """
    a = a.astype(np.float64)
    finite = np.isfinite(a)
    if not finite.all():
        a = np.where(finite, a, 0.0)
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if mode.startswith("I;16") or (mode == "I" and lo >= 0 and hi <= 65535):
        out = a / 257.0
    elif mode == "F" and lo >= 0 and hi <= 1:
        out = a * 255.0
    elif mode == "F" and lo >= 0 and hi <= 255:
        out = a
    else:
        out = (a - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(a)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _to_rgb(im: Image.Image) -> Image.Image:
    """Converts any Pillow mode to RGB; transparency is composited on white."""
    mode = im.mode
    if mode == "RGB":
        return im.copy()
    if mode.startswith("I") or mode == "F":
        grey = _scale_to_uint8(np.asarray(im), mode)
        return Image.fromarray(grey, "L").convert("RGB")
    has_alpha = mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        mode in ("P", "L", "RGB", "1") and "transparency" in im.info
    )
    if has_alpha:
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (*_WHITE, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    try:
        return im.convert("RGB")
    except (ValueError, OSError) as e:
        raise ImageError(f"images of Pillow mode {mode!r} cannot be converted to RGB: {e}") from None


def _from_array(a: np.ndarray, max_pixels: int | None) -> Image.Image:
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4))):
        raise ImageError(
            f"array of shape {a.shape} is not an image; expected HxW, HxWx1, HxWx3 or HxWx4 (channels last)"
        )
    _check_pixels((a.shape[1], a.shape[0]), max_pixels, "array")
    if a.dtype == np.uint8:
        u8 = a
    elif a.dtype == np.bool_:
        u8 = a.astype(np.uint8) * 255
    elif np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all():
            raise ImageError("array contains NaN or infinite values")
        lo, hi = float(a.min()), float(a.max())
        if lo < 0 or hi > 1:
            raise ImageError(
                f"float array values must lie in [0, 1], got [{lo:.4g}, {hi:.4g}]; pass uint8 for 0-255 data"
            )
        u8 = np.rint(a * 255.0).astype(np.uint8)
    else:
        raise ImageError(f"array dtype {a.dtype} is not supported; use uint8, or float in [0, 1]")
    mode = "L" if u8.ndim == 2 else ("RGB" if u8.shape[2] == 3 else "RGBA")
    return _to_rgb(Image.fromarray(np.ascontiguousarray(u8), mode))


# -- resizing and tensors ---------------------------------------------------------------------
def long_side_size(size: tuple[int, int], long_side: int) -> tuple[int, int]:
    """(width, height) of an image of ``size`` scaled so its longer side is ``long_side`` px."""
    w, h = size
    scale = long_side / max(w, h)
    return max(1, round(w * scale)), max(1, round(h * scale))


def resize_long_side(img: Image.Image, long_side: int, *, upscale: bool = True) -> Image.Image:
    """Resizes so that the longer side is ``long_side`` px, keeping the aspect ratio (Lanczos).

    Args:
        img: the image to resize.
        long_side: target length of the longer side, in pixels.
        upscale: if False, an image already smaller than ``long_side`` is returned unchanged.
    """
    if long_side < 1:
        raise ValueError(f"long_side must be a positive number of pixels, got {long_side}")
    w, h = img.size
    scale = long_side / max(w, h)
    if scale == 1 or (scale > 1 and not upscale):
        return img.copy()
    return img.resize(
        long_side_size(img.size, long_side),
        Image.Resampling.LANCZOS,
        reducing_gap=3.0 if scale < 0.5 else None,
    )


def image_to_tensor(
    img: Image.Image, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Converts an RGB image to a ``(1, 3, H, W)`` tensor with values in [0, 1]."""
    if img.mode != "RGB":
        img = _to_rgb(img)
    a = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
    t = a.permute(2, 0, 1).unsqueeze(0)
    return t.to(device=device, dtype=dtype).div_(255.0)


def tensor_to_image(t: torch.Tensor) -> Image.Image:
    """Converts a ``(3, H, W)`` or ``(1, 3, H, W)`` tensor in [0, 1] to an RGB image (clamped)."""
    if t.ndim == 4:
        if t.shape[0] != 1:
            raise ValueError(f"expected one image, got a batch of {t.shape[0]}; index it first")
        t = t[0]
    if t.ndim != 3 or t.shape[0] != 3:
        raise ValueError(f"expected a tensor of shape (3, H, W) or (1, 3, H, W), got {tuple(t.shape)}")
    a = t.detach().float().clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).cpu().numpy()
    return Image.fromarray(a, "RGB")


def _stats(t: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.tensor(mean, device=t.device, dtype=t.dtype).view(-1, 1, 1)
    s = torch.tensor(std, device=t.device, dtype=t.dtype).view(-1, 1, 1)
    return m, s


def normalize(
    t: torch.Tensor, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> torch.Tensor:
    """``(t - mean) / std`` of a ``(..., 3, H, W)`` tensor in [0, 1]; ImageNet's statistics by default."""
    m, s = _stats(t, mean, std)
    return (t - m) / s


def denormalize(
    t: torch.Tensor, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> torch.Tensor:
    """Inverse of :func:`normalize`."""
    m, s = _stats(t, mean, std)
    return t * s + m


# -- saving -----------------------------------------------------------------------------------
_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}


def save_image(img: Image.Image, path: str | os.PathLike, *, quality: int = 95) -> Path:
    """Saves as PNG or JPEG (chosen by the extension), atomically: no half-written file is left.

    An engine's result keeps where it came from (``img.info["nstcam"]``, which PIL's own ``save``
    drops): in PNG text chunks (``nstcam:weights``, ``nstcam:random_weights``) and, for random
    weights, a JPEG comment and a visible label in a margin below the picture
    (:func:`nstcam._mark.mark_random`; the picture's own pixels untouched).

    Args:
        img: the image to save; converted to RGB for JPEG.
        path: destination ending in ``.png``, ``.jpg`` or ``.jpeg``; parent folders are created.
        quality: JPEG quality, 1-95.

    Returns:
        The path written.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot save {path.name}: use a .png, .jpg or .jpeg file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    img = mark_random(img)
    with atomic_file(path, suffix=path.suffix) as fh:
        if fmt == "JPEG":
            comment = RANDOM_LABEL if is_random(img) else ""
            img.convert("RGB").save(fh, fmt, quality=quality, optimize=True, comment=comment)
        else:  # with where it came from (nstcam:weights, nstcam:random_weights) when the engines say
            img.save(fh, fmt, optimize=False, compress_level=6, pnginfo=png_info(img))
    return path
