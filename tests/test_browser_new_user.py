"""What a new user met (issue 62), in a browser: the Webcam tab paints Chromium's fake camera frame
after frame and stops when the tab is left; the Style tab's Fast mode shows its own controls (strength,
the 26 built-in styles) and hides the optimisation's."""

from __future__ import annotations

import pytest
from _browser import chromium, open_app

pytestmark = [pytest.mark.browser, pytest.mark.subprocess]


@pytest.fixture(scope="module")
def camera_browser():
    # a moving test pattern as the camera, no permission prompt
    with chromium("--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream") as b:
        yield b


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


def test_fast_mode_shows_its_own_controls_and_paints_a_built_in_style(server, images, camera_browser):
    c, _ = images
    context = camera_browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        open_app(page, server)
        steps = page.get_by_text("Steps (at most")
        fast_row = page.locator("#st-fast-row")
        fast_row.wait_for(state="visible", timeout=30_000)  # a CPU server opens in Fast (issue 64)
        assert page.locator("#st-mode").get_by_label("Fast", exact=True).is_checked()
        assert not steps.is_visible()
        estimate = page.locator("#st-estimate")  # the slower modes' cost, before any run
        assert "Optimise: 20 steps at 128 px: about" in estimate.inner_text()
        page.locator("#st-mode").get_by_label("Optimise").check()
        steps.wait_for(state="visible", timeout=10_000)
        assert not fast_row.is_visible()
        page.locator("#st-mode").get_by_label("Fast", exact=True).check()
        fast_row.wait_for(state="visible", timeout=10_000)
        assert not steps.is_visible()
        assert not page.get_by_text("Advanced").is_visible() and not page.get_by_text("Regions:").is_visible()
        page.locator("#st-content input[type=file]").set_input_files(str(c))
        page.locator("#st-content img").first.wait_for(timeout=30_000)
        page.locator("#st-builtin-a input").click()
        page.get_by_role("option", name="7", exact=True).click()
        page.locator("#st-run").click()
        status = page.locator("#st-status textarea")
        page.wait_for_function(
            "() => document.querySelector('#st-status textarea').value.startsWith('done')", timeout=60_000
        )
        assert "the 26-style network" in status.input_value() and "strength 1" in status.input_value()
        page.locator("#st-mode").get_by_label("Optimise").check()
        steps.wait_for(state="visible", timeout=10_000)
        assert not fast_row.is_visible()
    finally:
        context.close()
