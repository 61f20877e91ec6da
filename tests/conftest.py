"""Shared fixtures. Tests never download: NSTCAM_OFFLINE is set and weights go to a temp folder."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image

os.environ["NSTCAM_OFFLINE"] = "1"
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _isolated_weights(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NSTCAM_WEIGHTS_DIR", str(tmp_path_factory.mktemp("weights")))
    monkeypatch.setenv("NSTCAM_OFFLINE", "1")


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pattern(seed: int, w: int = 64, h: int = 48) -> Image.Image:
    """A seeded RGB test image: 8 px blocks of colour plus fine noise (something for VGG to see)."""
    rng = np.random.default_rng(seed)
    base = rng.random((h // 8, w // 8, 3))
    a = np.kron(base, np.ones((8, 8, 1))) * 0.7 + rng.random((h, w, 3)) * 0.3
    return Image.fromarray((a * 255).astype(np.uint8))
