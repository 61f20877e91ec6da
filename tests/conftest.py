"""Shared fixtures. Tests never download: NSTCAM_OFFLINE is set and weights go to a temp folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

os.environ["NSTCAM_OFFLINE"] = "1"
torch.set_num_threads(min(2, torch.get_num_threads()))
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_weights(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NSTCAM_WEIGHTS_DIR", str(tmp_path_factory.mktemp("weights")))
    monkeypatch.setenv("NSTCAM_OFFLINE", "1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_uploads(tmp_path_factory) -> Path:
    """The live server's upload folder (GRADIO_TEMP_DIR): where its uploads and cached files live."""
    return tmp_path_factory.mktemp("gradio_uploads")


@pytest.fixture(scope="session")
def server_log(tmp_path_factory) -> Path:
    """The live server's log (stdout and stderr)."""
    return tmp_path_factory.mktemp("server") / "app.log"


@pytest.fixture(scope="session")
def server(server_uploads, server_log):
    """The app launched on localhost with random weights (one per test session), its URL."""
    port = _free_port()
    log = server_log
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_TEMP_DIR=str(server_uploads),
        NSTCAM_MAX_SIZE="128",
        NSTCAM_MAX_STEPS="20",
        NSTCAM_MAX_UPLOAD_MB="1",
    )
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--random-weights", "--device", "cpu", "--mcp"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"app did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


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


def in_threads(fn, n: int) -> list:
    """``[fn(0), ..., fn(n - 1)]``, each call on a thread of its own, all running at once; an
    exception in any call is raised here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(fn, range(n)))
