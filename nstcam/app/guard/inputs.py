"""Files into the app: every file input reads only this server's uploads, granted to the request's
client, and is checked from its header (pixels, parts, container) before anything decodes it."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image

import nstcam.app.gradio_internals as gradio_internals
from nstcam.app.disk.access import ACCESS, current_client
from nstcam.app.errors import logger, refuse
from nstcam.image import ImageError, load_image, probe_image
from nstcam.video import MediaError, check_media

__all__ = [
    "BAD_UPLOAD",
    "EDITOR_PARTS",
    "NOT_AN_UPLOAD",
    "SafeEditor",
    "SafeFile",
    "SafeFiles",
    "SafeImage",
    "SafeVideo",
    "VIDEO_UPLOAD",
    "check_editor_parts",
    "editor_mask",
    "load_upload",
    "upload_size",
    "upload_path",
    "warn_bad_uploads",
]

NOT_AN_UPLOAD = (
    "only files uploaded to this server are read: send the file itself "
    "(the browser's upload box, gradio_client's handle_file, or a data: URL over MCP)"
)
"""Why a path outside the upload folder is refused: one text whatever the path is (missing, a
folder, a secret), so that a refusal tells nothing about the server's files."""


VIDEO_UPLOAD = (
    "A video file (mp4, webm, mov, mkv, avi, gif) sent as an upload: gradio_client.handle_file(path)."
)


def upload_path(payload: Any, what: str) -> str:
    """The one check every file input of the app passes: the real path of an upload, or a refusal.

    A request names its file by a server path (``{"path": ...}``). Gradio checks that path only
    when the request says it is a file (``meta``), so an image sent without it could name any
    file the server can read. Here a path is accepted only if, symlinks followed and ``..``
    resolved, it is a regular file inside Gradio's upload folder (where uploads, cached results
    and examples live) and, in a request, one granted to that request's client
    (:mod:`nstcam.app.disk.access`: its own uploads and results, the examples); anything else gets the
    one message :data:`NOT_AN_UPLOAD`, which says nothing about the path (whether it exists, what it
    is, whose it is). A Python call (no request) reads any upload.

    Args:
        payload: what Gradio hands a component's ``preprocess`` (a ``FileData`` / ``ImageData``),
            or a path.
        what: the input, as messages call it ("image", "video").

    Raises:
        gradio.Error: the path is not an upload to this server.
    """
    path = payload if isinstance(payload, (str, os.PathLike)) else getattr(payload, "path", None)
    if not path:
        raise refuse(f"Bad {what}: the request holds no file")
    real = os.path.realpath(os.fspath(path))
    inside = Path(real).is_relative_to(os.path.realpath(gradio_internals.upload_folder()))
    if not inside or not os.path.isfile(real):
        raise refuse(f"Bad {what}: {NOT_AN_UPLOAD}.")
    client = current_client()
    if client is not None and not ACCESS.may_read(real, client):  # another client's upload or result
        raise refuse(f"Bad {what}: {NOT_AN_UPLOAD}.")
    return real


def SafeImage(**kwargs: Any) -> gr.Image:  # noqa: N802 - reads like the component it builds
    """A ``gr.Image`` that hands the handler the uploaded file itself, once :func:`upload_path` has
    checked that it is an upload to this server.

    Gradio's own preprocessing decodes and re-encodes an upload (transparency turns red or black,
    16-bit greyscale white) and decodes it whole before any size limit applies. This one returns
    the file's path, so :func:`load_upload` (:func:`nstcam.load_image`, which reads the header
    first: a 13000 x 13000 px bomb is refused in milliseconds) sees exactly what the API would,
    and a bad image is the handler's refusal, shown in the tab's Status.
    """
    comp = gr.Image(type="filepath", **kwargs)

    def preprocess(payload: Any) -> str | None:
        return None if payload is None else upload_path(payload, "image")

    gradio_internals.install(comp, "preprocess", lambda _: preprocess)
    return comp


def SafeVideo(**kwargs: Any) -> gr.Video:  # noqa: N802 - reads like the component it builds
    """A ``gr.Video`` whose input passes :func:`upload_path`; Gradio's own preprocessing (which may
    run FFmpeg) sees it only if :func:`nstcam.video.check_media` finds one of the allowed containers
    in its bytes (never a playlist, whatever its name). Anything else goes to the handler as it is,
    whose :func:`nstcam.video.probe_video` refuses it with the same check, in the tab's Status."""
    comp = gr.Video(**kwargs)
    gradio_preprocess = comp.preprocess
    schema = {**comp.api_info(), "additional_description": VIDEO_UPLOAD}
    # API docs: what to send, not Gradio's FileData docstring
    gradio_internals.install(comp, "api_info", lambda _: lambda: schema)

    def preprocess(payload: Any) -> str | None:
        if payload is None:
            return None
        path = upload_path(payload, "video")
        try:  # the container from its own bytes, before Gradio (or its FFmpeg) reads it: no playlists
            check_media(path)
        except (MediaError, FileNotFoundError):
            return path  # the handler refuses it (probe_video, the same check) in the tab's Status
        return gradio_preprocess(payload)

    gradio_internals.install(comp, "preprocess", lambda _: preprocess)
    return comp


def SafeFile(what: str, **kwargs: Any) -> gr.File:  # noqa: N802 - reads like the component it builds
    """A ``gr.File`` (one file, handed over as its path) whose input passes :func:`upload_path`;
    ``what`` names the input in refusals ("volume"). The handler reads the file itself, checks first."""
    comp = gr.File(type="filepath", file_count="single", **kwargs)

    def preprocess(payload: Any) -> str | None:
        return None if payload is None else upload_path(payload, f"file ({what})")

    gradio_internals.install(comp, "preprocess", lambda _: preprocess)
    return comp


def SafeFiles(what: str, most: int, **kwargs: Any) -> gr.File:  # noqa: N802 - reads like the component it builds
    """A ``gr.File`` of several files (handed over as their paths), at most ``most`` of them (counted
    before any is looked at), each passing :func:`upload_path`; ``what`` names one in refusals."""
    comp = gr.File(type="filepath", file_count="multiple", **kwargs)

    def preprocess(payload: Any) -> list[str] | None:
        if payload is None:
            return None
        items = getattr(payload, "root", payload)
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        if len(items) > most:
            raise refuse(f"{what}s: {len(items)} sent, at most {most} on this server")
        return [upload_path(item, f"file ({what} {k})") for k, item in enumerate(items, 1)] or None

    gradio_internals.install(comp, "preprocess", lambda _: preprocess)
    return comp


BAD_UPLOAD = "Bad image"
"""How the Status names an upload that was taken out again (a run keeps that reason)."""


def warn_bad_uploads(images: list[tuple[gr.Image, str]], status: gr.components.Component) -> None:
    """A file that is not an image, dropped into one of ``images`` (component, what it is), is taken
    out again at once and said in ``status``, instead of showing a broken picture until Run."""

    def check(path: str | None, what: str) -> tuple[Any, Any]:
        if path is None:
            return gr.skip(), gr.skip()
        try:
            probe_image(path, name=Path(path).name)
        except (ImageError, FileNotFoundError) as e:
            return None, f"⚠️ {BAD_UPLOAD} ({what}): {e}"
        return gr.skip(), gr.skip()

    for image, what in images:
        image.upload(
            lambda path, what=what: check(path, what), image, [image, status], api_name=False, queue=False
        )


def load_upload(path: Any, what: str) -> Image.Image:
    """Decodes an upload; errors name it by its own file name and say which input it was."""
    return _read_upload(load_image, path, what)


def upload_size(path: Any, what: str, max_pixels: int | None = None) -> tuple[int, int]:
    """An upload's ``(width, height)`` from its header alone (nothing decoded), within
    ``max_pixels`` (default :data:`nstcam.image.DEFAULT_MAX_PIXELS`, as :func:`load_upload` decodes
    it); errors as its."""
    if max_pixels is None:
        return _read_upload(probe_image, path, what)
    return _read_upload(functools.partial(probe_image, max_pixels=max_pixels), path, what)


def _read_upload(read: Any, path: Any, what: str) -> Any:
    """``read(path, name=...)`` of an upload, its errors one refusal naming its own file name and the
    input it was."""
    if path is None:
        raise refuse(f"Upload {what}.")
    try:
        return read(path, name=Path(str(path)).name)
    except (ImageError, FileNotFoundError) as e:
        raise refuse(f"Bad image ({what}): {e}") from None


EDITOR_PARTS = 3
"""An image editor's value is decoded whole (background, each layer, the composite): all its parts
together may hold this many frames' worth of pixels (a background, one layer, their composite)."""


def SafeEditor(max_pixels: int = 3840 * 2160, **kwargs: Any) -> gr.ImageEditor:  # noqa: N802 - reads like the component it builds
    """A ``gr.ImageEditor`` (RGBA arrays, PNG layers) whose files pass :func:`upload_path` and the
    header check of :func:`nstcam.image.probe_image` before Gradio decodes any of them: each part
    (background, every layer, the composite) at most ``max_pixels``, all together at most
    :data:`EDITOR_PARTS` times that (a 116 KB black PNG of 6300 x 6300 px named as background,
    composite and 20 layers took over +3.6 GB before)."""
    comp = gr.ImageEditor(type="numpy", image_mode="RGBA", format="png", **kwargs)
    gradio_preprocess = comp.preprocess

    def preprocess(payload: Any) -> Any:
        if payload is None:
            return None
        check_editor_parts(payload, max_pixels)
        try:
            return gradio_preprocess(payload)
        except (OSError, ValueError, SyntaxError) as e:  # PIL: truncated or corrupt after its header
            logger.debug("mask not decoded: %s", e)
            raise refuse("Bad image (mask): it cannot be decoded (truncated or corrupt)") from None

    gradio_internals.install(comp, "preprocess", lambda _: preprocess)
    return comp


def check_editor_parts(payload: Any, max_pixels: int) -> int:
    """Checks every file of an image editor's value from its header (nothing decoded): an upload to
    this server, an image, at most ``max_pixels`` each and :data:`EDITOR_PARTS` x ``max_pixels`` in
    all; returns the pixels they hold."""
    parts = [
        getattr(payload, "background", None),
        getattr(payload, "composite", None),
        *(getattr(payload, "layers", None) or []),
    ]
    total, limit = 0, EDITOR_PARTS * max_pixels
    for part in parts:
        if not getattr(part, "path", None):
            continue
        path = upload_path(part, "mask")
        try:
            w, h = probe_image(path, name=Path(path).name, max_pixels=max_pixels)
        except (ImageError, FileNotFoundError) as e:
            raise refuse(f"Bad image (mask): {e}") from None
        total += w * h
        if total > limit:
            raise refuse(
                f"mask: its background, layers and composite hold more than {limit / 1e6:.1f} million "
                f"pixels in all; at most {EDITOR_PARTS} images of {max_pixels / 1e6:.1f} MP on this server"
            )
    return total


def editor_mask(value: Any, what: str) -> np.ndarray | None:
    """A mask from an image editor's value: what was painted on its layers (alpha; painted = 1),
    else its background (an uploaded mask, grey levels: white = 1), else None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise refuse(f"Bad {what}: send an image editor value (background, layers)")
    painted = [np.asarray(layer) for layer in value.get("layers") or [] if layer is not None]
    painted = [a for a in painted if a.ndim == 3 and a.shape[-1] == 4 and a[..., 3].any()]
    if painted:
        shape = painted[0].shape[:2]
        return np.max([a[..., 3] for a in painted if a.shape[:2] == shape], axis=0).astype(np.float32) / 255
    bg = value.get("background")
    if bg is None:
        return None
    bg = np.asarray(bg, np.float32)
    if bg.ndim == 3:
        bg = bg[..., :3].mean(-1)
    if min(bg.shape) < 1:
        raise refuse(f"Bad {what}: the image is empty")
    return bg / 255
