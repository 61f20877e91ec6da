"""End to end: the app launched on localhost with random weights, called through gradio_client and
driven in headless Chromium (skipped where Chromium is not installed; CI installs it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "app.log"
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        NSTCAM_MAX_SIZE="128",
        NSTCAM_MAX_STEPS="20",
    )
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--random-weights", "--device", "cpu"],
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


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    rng = np.random.default_rng(1)
    c = d / "content.png"
    Image.fromarray((rng.random((48, 72, 3)) * 255).astype(np.uint8)).save(c)
    bad = d / "upload.png"
    bad.write_bytes(b"GIF89a but not really an image")
    return c, bad


def test_endpoints_through_gradio_client(server, images):
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    c, bad = images
    client = Client(server, verbose=False)
    gallery, heat, table = client.predict(
        handle_file(str(c)), "resnet18", "layer4", "gradcam", 2, api_name="/gradcam"
    )
    assert len(gallery) == 2 and Image.open(gallery[0]["image"]).size == (72, 48)
    assert "RANDOM" in gallery[0]["caption"]
    assert Image.open(heat).size == (72, 48)
    assert len(table["data"]) == 2

    result = client.predict(
        handle_file(str(c)),
        handle_file(str(c)),
        None,
        0.0,
        64,
        3,
        50.0,
        1.0,
        5.0,
        False,
        1,
        "lbfgs",
        api_name="/stylize",
    )
    img_path, status, png = result
    assert Image.open(img_path).size == (64, 43) and "RANDOM" in status and png

    mask, result, before, after, md = client.predict(
        handle_file(str(c)),
        handle_file(str(c)),
        "subject",
        0.5,
        4,
        64,
        2,
        "resnet18",
        api_name="/subject_aware",
    )
    assert Image.open(mask).size == (72, 48) and Image.open(result).size == (64, 43)
    assert len(before) == 3 and len(after) == 3 and "map IoU" in md

    with pytest.raises(AppError, match="Bad image"):
        client.predict(handle_file(str(bad)), "resnet18", "layer4", "gradcam", 1, api_name="/gradcam")
    gallery, _, _ = client.predict(
        handle_file(str(c)), "resnet18", "layer4", "gradcam", 1, api_name="/gradcam"
    )
    assert len(gallery) == 1  # the server kept serving after the bad upload


def test_concurrent_requests_on_all_endpoints(server, images):
    """/stylize, /gradcam and /subject_aware at once (each endpoint has its own queue, so the three
    run together on the shared models): every request succeeds with what it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client, handle_file

    c, _ = images
    calls = {
        "stylize": (
            (handle_file(str(c)), handle_file(str(c)), None, 0.0, 64, 3, 50.0, 1.0, 5.0, False, 1, "lbfgs"),
            "/stylize",
            0,
        ),
        "gradcam_layer4": ((handle_file(str(c)), "resnet18", "layer4", "gradcam", 2), "/gradcam", 1),
        "gradcam_layer3": ((handle_file(str(c)), "resnet18", "layer3", "gradcam++", 2), "/gradcam", 1),
        "subject": (
            (handle_file(str(c)), handle_file(str(c)), "background", 0.5, 4, 64, 2, "resnet18"),
            "/subject_aware",
            1,
        ),
    }

    def call(name: str) -> np.ndarray:
        args, api, image_at = calls[name]
        out = Client(server, verbose=False).predict(*args, api_name=api)
        return np.asarray(Image.open(out[image_at]))

    alone = {name: call(name) for name in calls}
    work = [name for name in calls for _ in range(3)]
    with ThreadPoolExecutor(len(work)) as ex:
        together = list(ex.map(call, work))
    for name, got in zip(work, together, strict=True):
        assert np.array_equal(got, alone[name]), f"{name} differs when requests overlap"


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (apt-get install chromium chromium-driver)"
)
def test_browser_uploads_and_sees_gradcam_overlay(server, images):
    from playwright.sync_api import sync_playwright

    c, _ = images
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(server, wait_until="networkidle")
            assert page.get_by_text("Random weights").first.is_visible()
            page.get_by_role("tab", name="Grad-CAM").click()
            page.locator("#cam-input input[type=file]").set_input_files(str(c))
            page.locator("#cam-input img").first.wait_for(timeout=30_000)
            page.locator("#cam-run").click()
            page.locator("#cam-overlays img").first.wait_for(timeout=90_000)
            assert page.locator("#cam-overlays img").count() >= 1
            page.screenshot(path=str(ARTIFACTS / "browser_gradcam.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "browser_gradcam.png").stat().st_size > 10_000
