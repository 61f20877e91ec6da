"""Headless Chromium for the browser tests, driven by Playwright: one browser per test session (the
``browser`` fixture in ``conftest.py``; each test's ``browser.new_page`` is a context of its own),
and a page loaded until the network is quiet."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""Debian's Chromium (``apt-get install chromium chromium-driver``); None where it is absent."""

_PENDING: dict[int, set] = {}


def open_app(page, server: str) -> None:
    """Loads the app and waits until the network is quiet, Gradio's heartbeat aside: a page whose app
    keeps session state (``gr.State``: the volume viewer's) holds one request open to
    ``/gradio_api/heartbeat/`` for as long as it is open, so Playwright's "networkidle" never comes."""
    pending: set = set()
    _PENDING[id(page)] = pending
    page.on("request", lambda r: None if "/heartbeat/" in r.url else pending.add(r))
    page.on("requestfinished", lambda r: pending.discard(r))
    page.on("requestfailed", lambda r: pending.discard(r))
    page.goto(server, wait_until="load")
    settle(
        page, timeout_s=180.0
    )  # the page's load events queue behind the server's work: slow on a busy 2-core CI


def settle(page, idle_ms: int = 500, timeout_s: float = 60.0) -> None:
    """Waits until no request of ``page`` (opened with :func:`open_app`) has been pending for ``idle_ms``."""
    pending = _PENDING[id(page)]
    deadline, quiet_since = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        if pending:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= idle_ms / 1000:
            return
        page.wait_for_timeout(50)
    raise TimeoutError(f"requests still pending after {timeout_s:g} s: {[r.url for r in pending][:5]}")


def set_slider(page, label: str, value: int) -> None:
    """Types ``value`` into the visible slider labelled ``label`` (its number box; Gradio names it
    "number input for <label>") and presses Enter, as a person does."""
    box = page.locator(f"input[aria-label='number input for {label}']:visible").first
    box.fill(str(value))
    box.press("Enter")


FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
"""What every browser test's Chromium needs on this closed network (as root, headless)."""


def chromium(*flags: str):
    """Debian's Chromium, headless, launched and driven by Playwright (a context manager); ``flags``
    added to :data:`FLAGS` (the webcam test's fake camera)."""
    from contextlib import contextmanager

    @contextmanager
    def launched():
        if CHROMIUM is None:
            pytest.skip("Chromium not installed (apt-get install chromium chromium-driver)")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*FLAGS, *flags])
            try:
                yield b
            finally:
                b.close()

    return launched()


def start_chromium(folder: Path, timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """One headless Chromium for a whole test session, as a process of its own that Playwright
    connects to (its DevTools endpoint, the second item): a Playwright connection per test module
    (Playwright's sync API keeps an event loop running while it is open, which other tests'
    ``asyncio.run`` cannot share), one browser for all of them."""
    log = folder / "chromium.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--remote-debugging-port=0", f"--user-data-dir={folder / 'profile'}",
             *FLAGS, "about:blank"],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"DevTools listening on (ws://\S+)", log.read_text(errors="replace"))
        if found:
            return proc, found[1]
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"Chromium did not start: {log.read_text(errors='replace')[-2000:]}")
