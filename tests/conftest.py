"""Shared fixtures. Tests never download: NSTCAM_OFFLINE is set and weights go to a temp folder."""

from __future__ import annotations

import os

import pytest
import torch

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
