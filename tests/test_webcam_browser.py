"""The Webcam tab as a person uses it (issue 62): Chromium's fake camera streams into the tab, the
painted pane shows frame after frame, and leaving the tab stops the stream."""

from __future__ import annotations

import pytest
from test_server import CHROMIUM, open_app

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


@pytest.fixture(scope="module")
def camera_browser():
    if CHROMIUM is None:
        pytest.skip("Chromium not installed (apt-get install chromium chromium-driver)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--use-fake-device-for-media-stream",  # a moving test pattern as the camera
                "--use-fake-ui-for-media-stream",  # no permission prompt
            ],
        )
        try:
            yield b
        finally:
            b.close()


def _painted(page) -> str:
    img = page.locator("#cam-live-out img")
    return img.first.get_attribute("src") if img.count() else ""


def test_the_webcam_tab_paints_frames_and_stops_when_left(server, camera_browser):
    context = camera_browser.new_context(permissions=["camera"], viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        open_app(page, server)
        page.get_by_role("tab", name="Webcam").click()
        page.get_by_text("Click to Access Webcam").click()
        record = page.locator("#cam-live-in button.capture-button")
        record.wait_for(timeout=15_000)
        record.click()  # start streaming
        page.locator("#cam-live-out img").first.wait_for(timeout=60_000)
        frames = {_painted(page)}
        for _ in range(40):  # frame after frame: each painted frame is a new picture
            page.wait_for_timeout(250)
            frames.add(_painted(page))
            if len(frames) >= 3:
                break
        assert len(frames) >= 3, frames
        assert "frame may be at most" not in page.content()  # frames were refused before
        assert page.locator(".toast-body").count() == 0
        page.get_by_role("tab", name="Grad-CAM").click()
        page.wait_for_timeout(1500)  # the last frame in flight lands
        assert record.inner_text().strip() != "Stop"
        last = _painted(page)
        page.wait_for_timeout(2000)
        assert _painted(page) == last  # no frame painted behind the other tab
    finally:
        context.close()
