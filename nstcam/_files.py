"""Files written atomically, with the permissions a plain ``open()`` would have given them."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = [
    "IMAGE_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "BatchResult",
    "atomic_file",
    "expand_contents",
    "new_file_mode",
    "output_names",
    "unique_names",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
"""Image files a folder of inputs gives."""
VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v")
"""Clip files a folder of inputs gives (what the media opener reads is sniffed from the bytes)."""


def _umask_now() -> int:
    try:  # Linux: read it without changing it (os.umask would, for every thread, for a moment)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return _UMASK_AT_IMPORT


_UMASK_AT_IMPORT = os.umask(0o022)
os.umask(_UMASK_AT_IMPORT)


def new_file_mode() -> int:
    """0o666 less the process's umask: what ``open(path, "w")`` gives a new file (0o644 under 022)."""
    return 0o666 & ~_umask_now()


@contextmanager
def atomic_file(dest: Path, suffix: str = "") -> Iterator[IO[bytes]]:
    """A binary file that appears at ``dest`` only when the block ends without an exception.

    It is written under a hidden temporary name beside ``dest`` and then renamed over it, so no
    reader ever sees half a file. ``tempfile.mkstemp`` creates that file private (0600); it gets the
    umask's permissions before the rename, like any other file the process writes.
    """
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def unique_names(items: list[Any], suffix: str) -> list[str]:
    """``<stem><suffix>`` for each input (``image0003`` for one that is not a path), made unique:
    ``a.png`` and ``a.jpg`` both fit (``a_jpg<suffix>``), then ``<stem><suffix stem>_2...``."""
    names: list[str] = []
    seen: set[str] = set()
    base, ext = os.path.splitext(suffix)
    for i, item in enumerate(items):
        is_path = isinstance(item, (str, Path))
        stem = Path(item).stem if is_path else f"image{i:04d}"
        name = f"{stem}{suffix}"
        if name in seen and is_path:
            name = f"{stem}_{Path(item).suffix.lstrip('.')}{suffix}"
        k = 2
        while name in seen:
            name = f"{stem}{base}_{k}{ext}"
            k += 1
        seen.add(name)
        names.append(name)
    return names


def expand_contents(contents: str | Path | Sequence[Any]) -> list[Any]:
    """A list of inputs from a list, a directory (its image files, sorted) or a glob pattern."""
    if isinstance(contents, (str, Path)):
        p = Path(contents)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS and f.is_file())
            if not files:
                raise ValueError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) in {p}")
            return files
        if not p.exists() and any(ch in str(contents) for ch in "*?["):  # a file is a file: photo[1].jpg
            files = sorted(Path(f) for f in glob.glob(str(contents), recursive=True) if Path(f).is_file())
            if not files:
                raise ValueError(f"no files match {contents!r}")
            return files
        if not p.exists():
            raise FileNotFoundError(
                f"contents: {p} does not exist; give a folder, a glob pattern, an image file or a list"
            )
        return [p]
    items = list(contents)
    if not items:
        raise ValueError("contents is empty")
    return items


def output_names(items: list[Any], ext: str) -> list[str]:
    """``<stem>_stylized<ext>`` for each input, made unique (``a.png`` and ``a.jpg`` both fit)."""
    return unique_names(items, f"_stylized{ext}")


class BatchResult(list):
    """Output paths of :meth:`StyleTransfer.stylize_batch` and :meth:`FastStyle.stylize_batch`
    (written and already present).

    Attributes:
        written: outputs written by this call.
        skipped: outputs that existed already and were kept.
        failed: input -> error message, for inputs that could not be stylised.
    """

    def __init__(self) -> None:
        super().__init__()
        self.written: list[Path] = []
        self.skipped: list[Path] = []
        self.failed: dict[str, str] = {}
