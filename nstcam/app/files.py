"""Files in and out of the app: uploads handed over untouched, results written once each."""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from nstcam.app.errors import refuse
from nstcam.image import ImageError, load_image, probe_image, save_image

__all__ = ["Outbox", "SafeImage", "load_upload"]


class Outbox:
    """Where results are written for Gradio to serve: a private folder, a fresh subfolder per file.

    Gradio copies a returned file into its cache atomically; images returned as PIL objects would
    instead be written by Gradio under a name derived from their content, and two identical
    requests could then read a file while the other rewrites it. Files here are pruned after
    ``keep_s`` seconds (Gradio has copied them long before), and the folder goes with the process.

    Args:
        keep_s: how long a file is kept.
    """

    def __init__(self, keep_s: float = 600.0) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="nstcam-out-")
        self.root = Path(self._dir.name)
        self.keep_s = keep_s
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def save(self, img: Image.Image, name: str) -> str:
        """Writes ``img`` as ``name`` in a new subfolder and returns its path."""
        path = self.reserve(name)
        save_image(img, path)
        return str(path)

    def reserve(self, name: str) -> Path:
        """A path ``name`` in a new subfolder, for a file the caller writes (a video)."""
        now = time.time()
        with self._lock:
            prune = now >= self._next_prune
            if prune:
                self._next_prune = now + self.keep_s / 10
            folder = self.root / f"{os.getpid()}-{next(self._ids)}"
        if prune:  # at most ten times per keep_s: previews are saved often
            self.prune()
        folder.mkdir()
        return folder / name

    def prune(self) -> None:
        """Deletes files older than ``keep_s`` seconds."""
        cutoff = time.time() - self.keep_s
        for folder in list(self.root.iterdir()):
            try:
                if folder.stat().st_mtime < cutoff:
                    for f in folder.iterdir():
                        f.unlink(missing_ok=True)
                    folder.rmdir()
            except OSError:
                continue  # another request pruned it first

    def __len__(self) -> int:
        return sum(1 for _ in self.root.iterdir())


def SafeImage(**kwargs: Any) -> gr.Image:  # noqa: N802 - reads like the component it builds
    """A ``gr.Image`` that hands the handler the uploaded file itself, checked from its header.

    Gradio's own preprocessing decodes and re-encodes an upload (transparency turns red or black,
    16-bit greyscale white) and decodes it whole before any size limit applies. This one reads the
    header only (:func:`nstcam.probe_image`: a 13000 x 13000 px bomb is refused in milliseconds)
    and returns the file's path, so :func:`nstcam.load_image` sees exactly what the API would.
    """
    comp = gr.Image(type="filepath", **kwargs)

    def preprocess(payload: Any) -> str | None:
        if payload is None:
            return None
        path = getattr(payload, "path", None)
        if path is None:
            raise refuse("Bad image: the upload holds no file")
        name = getattr(payload, "orig_name", None) or Path(path).name
        try:
            probe_image(path, name=name)
        except (ImageError, FileNotFoundError) as e:
            raise refuse(f"Bad image: {e}") from None
        return path

    comp.preprocess = preprocess
    return comp


def load_upload(path: Any, what: str) -> Image.Image:
    """Decodes an upload; errors name it by its own file name and say which input it was."""
    if path is None:
        raise refuse(f"Upload {what}.")
    name = Path(str(path)).name
    try:
        return load_image(path, name=name)
    except (ImageError, FileNotFoundError) as e:
        raise refuse(f"Bad image ({what}): {e}") from None
