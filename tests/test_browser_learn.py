"""The "Learn a style" tab on the live app (issue 65): through gradio_client, the style file it
returns paints in /stylize's Fast mode; in a browser, a person learns a painting, cancels a run,
downloads the file and paints a photo with it in the Style tab."""

from __future__ import annotations

import json

from _browser import open_app
from PIL import Image

from nstcam.fast import LearnedStyle


def test_the_style_file_from_learn_style_paints_in_fast_mode(server, images):
    from gradio_client import Client, handle_file

    c, _ = images
    client = Client(server, verbose=False)
    preview, status, path = client.predict(
        painting=handle_file(str(c)),
        size=64,
        steps=3,
        batch=1,
        seed=0,
        content_weight=2,
        api_name="/learn_style",
    )
    assert status.startswith("done: 3 steps in ") and "RANDOM" in status
    learned = LearnedStyle.load(path)
    assert len(learned.losses) == 3 and learned.random_weights and Image.open(preview).size[0] == 256
    assert json.loads(learned.meta["settings"])["content_weight"] == 2  # the slider reached the loss
    img, said, _ = client.predict(
        content=handle_file(str(c)),
        style=None,
        size=64,
        mode="fast",
        style_file=handle_file(path),
        api_name="/stylize",
    )
    assert "a learned style, learned on RANDOM VGG weights" in said and Image.open(img).size[0] == 64


def _status(page) -> str:
    return page.locator("#ls-status textarea").input_value()


def _set(page, elem: str, value: int) -> None:
    box = page.locator(f"#{elem} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_a_person_learns_cancels_downloads_and_paints_with_the_file(server, images, browser):
    c, _ = images
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    try:
        open_app(page, server)
        page.get_by_role("tab", name="Learn a style").click()
        page.locator("#ls-painting input[type=file]").set_input_files(str(c))
        page.locator("#ls-painting img").first.wait_for(timeout=30_000)
        _set(page, "ls-size", 64)
        _set(page, "ls-batch", 1)
        _set(page, "ls-steps", 400)
        page.locator("#ls-run").click()  # a long run, cancelled once it has started
        page.wait_for_function(
            "() => document.querySelector('#ls-status textarea').value.startsWith('step 2/400')",
            timeout=180_000,
        )
        page.locator("#ls-cancel").click()
        page.wait_for_function(
            "() => document.querySelector('#ls-status textarea').value.startsWith('cancelled')",
            timeout=30_000,
        )
        assert "no style file" in _status(page) and page.locator("#ls-file a").count() == 0
        photos = [c.with_name("photo_a.png"), c.with_name("photo_b.png")]  # two photos of its own, as a list
        for k, p in enumerate(photos):
            Image.open(c).rotate(90 * (k + 1), expand=True).save(p)
        page.locator("#ls-photos input[type=file]").set_input_files([str(p) for p in photos])
        page.wait_for_function(
            "() => (document.querySelector('#ls-photos') || {}).innerText.includes('photo_b')", timeout=30_000
        )
        _set(page, "ls-steps", 3)
        page.locator("#ls-run").click()
        page.wait_for_function(
            "() => document.querySelector('#ls-status textarea').value.startsWith('done')", timeout=180_000
        )
        assert _status(page).startswith("done: 3 steps") and page.locator("#ls-preview img").count() == 1
        with page.expect_download() as got:
            page.locator("#ls-file a").first.click()
        saved = got.value.path()
        assert len(LearnedStyle.load(saved).losses) == 3
        page.get_by_role("tab", name="Style transfer").click()
        page.locator("#st-fast-row").wait_for(state="visible", timeout=30_000)
        page.locator("#st-content input[type=file]").set_input_files(str(c))
        page.locator("#st-content img").first.wait_for(timeout=30_000)
        named = saved.with_name("mine.safetensors")
        named.write_bytes(saved.read_bytes())
        page.locator("#st-style-file input[type=file]").set_input_files(str(named))
        page.locator("#st-style-file").get_by_text("mine.safetensors").wait_for(timeout=30_000)
        page.locator("#st-run").click()
        page.wait_for_function(
            "() => document.querySelector('#st-status textarea').value.startsWith('done')", timeout=60_000
        )
        assert "a learned style" in page.locator("#st-status textarea").input_value()
    finally:
        page.close()
