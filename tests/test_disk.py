"""Disk (issue 61): a client's uploads capped per window, a crashed server's leftovers swept at the
next start (only its own), and a server's SIGTERM never removing a file another server made with the
same name."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HTTP, _free_port, app_env, launch_app, pattern
from test_security import upload

from nstcam.app.disk.owned import Owned, claimed_by_others, ledger_folder, sweep_leftovers
from nstcam.app.guard.limits import RequestLimits
from nstcam.app.guard.quota import UploadQuota, client_of


async def _fake_upload_app(scope, receive, send):
    """Reads the whole body, answers 200 (Gradio's upload route as far as the middleware sees)."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"[]"})


def _post(mw: RequestLimits, n: int, declared: bool, client: str = "203.0.113.7") -> int:
    """Status of an upload of ``n`` bytes in 64 KB chunks (with or without its Content-Length)."""
    chunks = [b"\0" * 65536] * (n // 65536)
    headers = [(b"content-length", str(n).encode())] if declared else []
    scope = {"type": "http", "method": "POST", "path": "/gradio_api/upload", "headers": headers}
    scope["client"] = (client, 5000)
    sent, status = iter(chunks), {}

    async def receive():
        chunk = next(sent, None)
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    async def send(message):
        if message["type"] == "http.response.start":
            status["code"] = message["status"]

    asyncio.run(mw(scope, receive, send))
    return status["code"]


def test_a_clients_uploads_are_capped_per_window_and_others_are_not_affected():
    now = [0.0]
    quota = UploadQuota(4 * 2**20, window_s=600, clock=lambda: now[0])
    mw = RequestLimits(_fake_upload_app, upload_bytes=2 * 2**20, quota=quota)
    mb = 2**20
    assert [_post(mw, int(1.5 * mb), True) for _ in range(2)] == [200, 200]  # 3 MB of 4
    assert _post(mw, int(1.5 * mb), True) == 429  # refused from its declared length, unread
    assert _post(mw, int(1.5 * mb), False) == 429  # chunked: cut where it passes its share
    assert quota.left("203.0.113.7") == 1 * mb  # the refused ones were not counted
    assert _post(mw, int(1.5 * mb), True, client="198.51.100.2") == 200  # another client
    now[0] = 601.0  # the window has moved on
    assert _post(mw, int(1.5 * mb), True) == 200
    assert "at most 4 MB in 10 minutes on this server (5 MB would go over it)" in quota.refusal(mb, 2 * mb)


def test_the_client_is_the_address_the_nearest_proxy_saw():
    scope = {"client": ("10.0.0.2", 1), "headers": [(b"x-forwarded-for", b"1.2.3.4, 198.51.100.9")]}
    assert client_of(scope) == "198.51.100.9"  # the first entries are the client's own words
    assert client_of({"client": ("10.0.0.2", 1), "headers": []}) == "10.0.0.2"
    stranger = {"client": ("8.8.4.4", 1), "headers": [(b"x-forwarded-for", b"198.51.100.9")]}
    assert client_of(stranger) == "8.8.4.4"  # no proxy in between: its own header is not read


def _ledger_of_another_process(folder: Path, files: list[Path]) -> subprocess.Popen:
    """A live process whose ledger lists ``files`` (what another server would have recorded)."""
    code = (
        "import sys, time\n"
        "from nstcam.app.disk.owned import Owned\n"
        "o = Owned(sys.argv[1])\n"
        "[o.add(p) for p in sys.argv[2:]]\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder), *map(str, files)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_ledger_removes_only_its_own_files_and_a_dead_servers_are_swept(tmp_path):
    folder = tmp_path / "uploads"
    (folder / "abc").mkdir(parents=True)
    mine, theirs = folder / "abc" / "mine.png", folder / "abc" / "theirs.png"
    mine.write_bytes(b"1")
    theirs.write_bytes(b"2")
    other = _ledger_of_another_process(folder, [theirs])
    try:
        owned = Owned(folder)
        owned.add(mine)
        owned.add(theirs)  # the same name recorded by both: the other live server keeps it
        assert theirs.stat().st_ino in claimed_by_others(folder)
        assert not owned.ledger.resolve().is_relative_to(folder.resolve())  # never where Gradio serves
        assert owned.ledger.parent.stat().st_mode & 0o077 == 0  # nor readable by other users
        assert owned.remove_all() == 1 and not mine.exists() and theirs.exists()
        assert not owned.ledger.exists()
    finally:
        other.kill()
        other.wait()
    # the other server died without cleaning up: the next start sweeps what its ledger lists
    outbox = tmp_path / f"nstcam-out-{other.pid}-x1"
    outbox.mkdir()
    (outbox / "result.png").write_bytes(b"3")
    live_outbox = tmp_path / f"nstcam-out-{os.getpid()}-x2"
    live_outbox.mkdir()
    assert sweep_leftovers(folder, tmp_path) == 2
    assert not theirs.exists() and not outbox.exists() and live_outbox.exists()
    assert list(ledger_folder(folder).glob("*.owned")) == [] and list(folder.rglob("*.owned")) == []


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_second_servers_sigterm_leaves_the_first_servers_files(server, server_uploads, tmp_path):
    """A second server on the live server's upload folder (the session's server is the first: one
    boot, not two, since issue 74): the same photo uploaded to both gets the same name, and the
    second's SIGTERM leaves it to the first, which still serves it. That a server's own SIGTERM
    removes what it made: test_hostile_requests.py's SIGTERM test."""
    photo = tmp_path / "c.png"
    pattern(2, 96, 64).save(photo)
    port = _free_port()
    log = tmp_path / "app.log"
    proc = launch_app(log, app_env(port, server_uploads))
    try:
        deadline = time.time() + 120
        while "Running on" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.3)
        first = upload(server, photo)["path"]
        second = upload(f"http://127.0.0.1:{port}/", photo)["path"]  # the same content: the same name
        assert first == second and Path(first).exists()
        # issue 88.11, the other order: the second server made the file, then the first's visitor
        # sent the same photo; the second's SIGTERM removed it, and the first refused its own
        # visitor's photo ("only files uploaded to this server are read")
        later = tmp_path / "later.png"
        pattern(5, 80, 56).save(later)
        made = upload(f"http://127.0.0.1:{port}/", later)["path"]
        assert upload(server, later)["path"] == made
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        for path, content in ((first, photo), (made, later)):
            assert Path(path).exists()  # the first server's files stay, whoever made them
            r = HTTP.get(server + f"gradio_api/file={path}", timeout=10)
            assert r.status_code == 200 and r.content == content.read_bytes()
        r = HTTP.post(
            server + "gradio_api/call/features",
            json={"data": [{"path": made, "meta": {"_type": "gradio.FileData"}}, "resnet18", "layer2", 2]},
        )
        said = HTTP.get(server + f"gradio_api/call/features/{r.json()['event_id']}", timeout=60).text
        assert "event: complete" in said, said[-500:]  # its visitor's photo is still read
    finally:
        if proc.poll() is None:
            proc.kill()
