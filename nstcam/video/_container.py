"""Opening media safely: the one way nstcam hands a file to FFmpeg.

FFmpeg picks a demuxer from a file's bytes, and some demuxers read other files or URLs: an HLS or
DASH playlist, a concat or ffconcat list, an SDP description, an image sequence, a ``subfile:``
or ``file:`` URL in any of them. A playlist uploaded to a public server (whatever its name) would
then return the server's own files. So here:

- the demuxer is chosen by nstcam from a short allow-list of real container formats
  (:data:`CONTAINERS`), recognised from the file's first bytes; anything else is refused before
  FFmpeg opens anything;
- FFmpeg reads the file through a Python file object (the path is never parsed as a URL), with the
  protocol whitelist set to none, so no demuxer can open a second file or a URL; MP4/MOV external
  data references stay off.

Both the frames (:mod:`nstcam.video.source`) and the audio carried over (:mod:`nstcam.video.sink`)
come from a container opened here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import av

__all__ = ["CONTAINERS", "MediaError", "check_media", "container_format", "open_media"]

CONTAINERS: dict[str, str] = {
    "mov": "MP4 / MOV / M4V",
    "matroska": "Matroska / WebM",
    "avi": "AVI",
    "mpegts": "MPEG-TS",
    "gif": "animated GIF",
}
"""The FFmpeg demuxers nstcam opens (name: what a message calls it). None of them reads any file but
the one it is given."""

_HEAD = 1024
_ISO_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot")
_TS_PACKET = 188
_NO_PROTOCOL = "none"  # the name of no protocol: a nested open of any URL or file is refused
_OPTIONS: dict[str, dict[str, str]] = {"mov": {"enable_drefs": "0", "use_absolute_path": "0"}}


class MediaError(ValueError):
    """A file that is not one of the allowed containers. The message names the file (its own name)
    and the formats that are opened."""


def _is_iso_bmff(head: bytes) -> bool:
    if len(head) < 8 or head[4:8] not in _ISO_BOXES:
        return False
    box = int.from_bytes(head[:4], "big")  # 0: to the end of the file; 1: a 64-bit size follows
    return box in (0, 1) or box >= 8


def _is_mpegts(head: bytes, size: int) -> bool:
    packets = [i for i in range(0, min(size, len(head)), _TS_PACKET)][:4]
    return bool(packets) and all(head[i] == 0x47 for i in packets)


def container_format(head: bytes, size: int | None = None) -> str | None:
    """The allowed demuxer (a key of :data:`CONTAINERS`) for a file starting with ``head``, or None.

    Args:
        head: the file's first bytes (1 KiB is enough).
        size: the file's size (default ``len(head)``).
    """
    size = len(head) if size is None else size
    if _is_iso_bmff(head):
        return "mov"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "matroska"
    if head[:4] == b"RIFF" and head[8:12] in (b"AVI ", b"AVIX"):
        return "avi"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if _is_mpegts(head, size):
        return "mpegts"
    return None


def _refusal(name: str) -> MediaError:
    kinds = ", ".join(CONTAINERS.values())
    return MediaError(
        f"{name} is not a video file nstcam opens ({kinds}); playlists and lists that name other files "
        "or URLs (HLS, DASH, concat, SDP) are never opened"
    )


def check_media(path: str | os.PathLike, name: str | None = None) -> str:
    """The allowed demuxer for ``path``, read from its first bytes; a refusal otherwise.

    Raises:
        FileNotFoundError: no such file (the message names it by ``name``).
        MediaError: not one of :data:`CONTAINERS`.
    """
    label = name or Path(path).name
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
            size = os.fstat(fh.fileno()).st_size
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise FileNotFoundError(f"video file not found: {label}") from None
    fmt = container_format(head, size)
    if fmt is None:
        raise _refusal(label)
    return fmt


@contextmanager
def open_media(
    path: str | os.PathLike, name: str | None = None, options: dict[str, str] | None = None
) -> Iterator[Any]:
    """``av.open`` for reading, safely: the demuxer from the allow-list, no protocol, no URL.

    Args:
        path: the file.
        name: how messages call it (its own name, never a server path).
        options: more FFmpeg options (``skip_frame``...).

    Yields:
        The open PyAV input container (closed on exit).

    Raises:
        FileNotFoundError: no such file.
        MediaError: not an allowed container.
        av.error.FFmpegError: FFmpeg cannot read it as that container.
    """
    fmt = check_media(path, name)
    opts = {**(options or {}), **_OPTIONS.get(fmt, {}), "protocol_whitelist": _NO_PROTOCOL}
    with open(path, "rb") as fh, av.open(fh, "r", format=fmt, options=opts) as container:
        yield container
