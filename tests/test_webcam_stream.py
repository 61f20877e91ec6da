"""The webcam stream as a stranger would use it (issue 61): a few streams in all and one per client,
so idle streams never fill the queue; a gone client's stream freed at once; each frame's header
checked before decoding; the painting decoded once per stream; a per-client budget that chained
streams cannot reset."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import uuid

import gradio as gr
import numpy as np
import pytest
from conftest import HTTP, pattern, rss_mb
from gradio.data_classes import ImageData
from PIL import Image
from test_hostile_requests import _event, live  # noqa: F401 - the live app's endpoints (a fixture)
from test_security import call

from nstcam.app.config import AppConfig, Models
from nstcam.app.guard.streams import MAX_STREAMS, SafeFrame, frame_size
from nstcam.app.tabs import webcam as webcam_tab
from nstcam.app.tabs.webcam import Webcam, webcam_handler


def _data_url(img: Image.Image, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


def test_a_frame_is_checked_from_its_header_before_it_is_decoded():
    cap = 3840 * 2160
    bomb = _data_url(Image.new("L", (13000, 13000), 0))  # the stranger's 492 KB PNG of 169 MP
    assert len(bomb) < 1024 * 1024 and frame_size(bomb) == (13000, 13000)
    frame = SafeFrame(cap)
    before, start = rss_mb(), time.perf_counter()
    with pytest.raises(gr.Error, match=r"frame is 13000x13000 px; at most 8.3 MP and 8 px a side"):
        frame.preprocess(ImageData(url=bomb))
    assert time.perf_counter() - start < 2 and rss_mb() - before < 300
    ok = frame.preprocess(ImageData(url=_data_url(pattern(1, 64, 48), "JPEG")))
    assert ok.shape == (48, 64, 3)  # a real frame decodes as before
    for bad, said in [
        ("data:text/plain;base64,aGk=", "base64 data: URL"),
        ("data:image/png;base64,AAAA", "not an"),
    ]:
        with pytest.raises(gr.Error, match=said):
            frame.preprocess(ImageData(url=bad))


def test_the_painting_is_read_once_per_stream_and_the_budget_outlives_a_stream(tmp_path, monkeypatch):
    models = Models(AppConfig(random_weights=True, device="cpu"))
    painting = tmp_path / "painting.png"
    pattern(3, 96, 96).save(painting)
    reads = []
    real = webcam_tab.load_upload
    monkeypatch.setattr(webcam_tab, "load_upload", lambda p, what: reads.append(p) or real(p, what))
    cam = Webcam(seconds=1e9, window_s=600)
    frame = np.asarray(pattern(4, 64, 48))
    webcam_handler(models, frame, 0, None, 64)  # the fast network loaded first: not a frame's cost
    first = webcam_handler(models, frame, 0, str(painting), 64, cam, "198.51.100.1")
    for _ in range(3):
        again = webcam_handler(models, frame, 0, str(painting), 64, cam, "198.51.100.1")
    assert len(reads) == 1 and np.array_equal(first, again)  # decoded once, the same picture
    direct = webcam_handler(models, frame, 0, str(painting), 64)  # no stream state: read each frame
    assert np.abs(direct.astype(int) - first.astype(int)).max() <= 1
    cam = Webcam(seconds=1.0, window_s=600)
    deadline = time.time() + 60
    with pytest.raises(gr.Error, match=r"the webcam may paint at most 1 s per 10 minutes for one client"):
        while time.time() < deadline:  # a stream that ends and starts again keeps the same budget
            webcam_handler(models, frame, 0, None, 64, cam, "198.51.100.1")
    assert webcam_handler(models, frame, 0, None, 64, cam, "198.51.100.2").shape[:2] == (48, 64)


def _join(server: str, fn_index: int, data: list, client: str) -> tuple[int, str, str]:
    """A stream's queue request from ``client`` (a proxy on loopback names it); (status, text, session)."""
    session = uuid.uuid4().hex[:12]
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None}
    r = HTTP.post(
        server + "gradio_api/queue/join", json=body, headers={"x-forwarded-for": client}, timeout=30
    )
    return r.status_code, r.text, session


@pytest.mark.subprocess
def test_idle_streams_never_fill_the_queue_and_a_gone_clients_stream_is_freed(server, live):  # noqa: F811
    fn_index = next(i for i, inputs in live["endpoints"]["paint_frame"])
    frame = {"url": _data_url(pattern(5, 64, 48), "JPEG"), "meta": {"_type": "gradio.FileData"}}
    data = [frame, 0, None, 64, None]  # the frame, a built-in style, no painting, 64 px, no style file
    answers = [_join(server, fn_index, data, f"198.51.100.{k}") for k in range(40)]
    accepted = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] != 200]
    assert len(accepted) <= MAX_STREAMS and len(refused) >= 40 - MAX_STREAMS
    assert {a[0] for a in refused} == {429}
    assert all("webcam streams at once" in json.loads(a[1])["detail"] for a in refused)
    # one client: one stream
    status, text, _ = _join(server, fn_index, data, "198.51.100.0")
    assert status == 429 and "at most 1 webcam stream" in text
    # the rest of the server still answers (before: HTTP 503 "Queue is full" to everyone)
    cam, cam_data = _event(live, "gradcam", i1="resnet18", i4=1)
    assert call(server, cam, cam_data, timeout=60)["success"]
    # a client that goes away frees its stream at once: its event stream opened, then closed
    freed = threading.Event()

    def listen_then_leave(session: str) -> None:
        with HTTP.stream("GET", server + f"gradio_api/queue/data?session_hash={session}", timeout=30) as s:
            for _ in s.iter_lines():
                break
        freed.set()

    for _, _, session in accepted:
        listen_then_leave(session)
    deadline = time.time() + 10
    while time.time() < deadline:
        status, text, session = _join(server, fn_index, data, "198.51.100.0")
        if status == 200:
            break
        time.sleep(0.2)
    assert status == 200, text
    listen_then_leave(session)  # gone too: the stream frees the one painting slot for the next test


@pytest.mark.subprocess
def test_frames_are_dropped_not_queued_when_the_server_is_behind(server, live):  # noqa: F811
    """Gradio keeps a stream's latest frame only (each one sent replaces the last): a burst of 4K
    frames, faster than they are painted, is painted in part, never queued up behind."""
    from concurrent.futures import ThreadPoolExecutor

    fn_index = next(i for i, _ in live["endpoints"]["paint_frame"])
    big = {
        "url": _data_url(Image.new("RGB", (3840, 2160), (90, 40, 20)), "JPEG"),
        "meta": {"_type": "gradio.FileData"},
    }
    data = [big, 0, None, 64, None]
    status, text, session = _join(server, fn_index, data, "198.51.100.77")
    assert status == 200, text
    event_id = json.loads(text)["event_id"]
    painted, done = [], threading.Event()

    def listen() -> None:
        with HTTP.stream("GET", server + f"gradio_api/queue/data?session_hash={session}", timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:]).get("msg")
                    painted.append(msg)
                    if msg == "process_completed":
                        break
        done.set()

    listener = threading.Thread(target=listen)
    listener.start()
    deadline = time.time() + 60
    while "process_starts" not in painted and time.time() < deadline:  # its turn to paint has come
        time.sleep(0.1)
    body = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None}
    sent = 40
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda _: HTTP.post(server + f"gradio_api/stream/{event_id}", json=body, timeout=60),
                range(sent),
            )
        )
    time.sleep(3)
    HTTP.post(server + f"gradio_api/stream/{event_id}/close", timeout=30)
    listener.join(60)
    frames = painted.count("process_streaming")
    assert 1 <= frames < sent, (frames, sent)  # the burst's frames mostly dropped, the latest painted
