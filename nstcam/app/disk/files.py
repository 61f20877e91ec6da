"""The results the app writes: each in a fresh private subfolder, once, for Gradio to serve."""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from pathlib import Path

from PIL import Image

from nstcam.app.errors import logger
from nstcam.image import save_image

__all__ = ["Outbox"]


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
        self._dir = tempfile.TemporaryDirectory(prefix=f"nstcam-out-{os.getpid()}-")  # swept if left
        self.root = Path(self._dir.name)
        logger.info("results folder %s (removed when the app stops)", self.root)
        self.keep_s = keep_s
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def save(self, img: Image.Image, name: str) -> str:
        """Writes ``img`` as ``name`` in a new subfolder and returns its path; an image of random
        weights (``info["nstcam"]``) says so on itself and in its metadata."""
        path = self.reserve(name)
        save_image(img, path)  # random weights: said below the picture and in its metadata
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

    def close(self) -> None:
        """Removes the folder and every result in it (the app is stopping)."""
        self._dir.cleanup()
